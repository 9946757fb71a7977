"""Progress: a redrawn bar with counts and an ETA on a terminal, plain lines elsewhere."""

import sys
import time
from collections import Counter
from typing import TextIO


class Progress:
    def __init__(self, total_groups: int, stream: TextIO = sys.stderr, every_s: float = 10.0) -> None:
        self.total, self.done = max(total_groups, 1), 0
        self.counts: Counter[str] = Counter()
        self.stream, self.tty, self.every_s = stream, stream.isatty(), every_s
        self.start = self.last = time.monotonic()

    def case(self, status: str) -> None:
        self.counts[status] += 1
        self._show()

    def group_done(self) -> None:
        self.done += 1
        self._show()

    def _line(self) -> str:
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        counts = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return f"{self.done}/{self.total} op×dtype groups, {elapsed:.0f} s, ETA {eta:.0f} s | {counts}"

    def _show(self) -> None:
        now = time.monotonic()
        if self.tty:
            width = 24
            filled = int(width * self.done / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self._line()}\x1b[K")
            self.stream.flush()
        elif now - self.last >= self.every_s:
            self.stream.write(self._line() + "\n")
            self.stream.flush()
            self.last = now

    def finish(self) -> None:
        self.stream.write(("\r" if self.tty else "") + self._line() + ("\x1b[K\n" if self.tty else "\n"))
        self.stream.flush()

    def interrupted(self) -> None:
        """End a redrawn bar's line, so what follows starts on its own."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
