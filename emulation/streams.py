"""Stream, Event and the stream context manager of an emulated device module.

They subclass torch.Stream and torch.Event, whose methods reach the runtime's DeviceGuardImpl
(csrc/guard.cpp): work runs synchronously, so streams are always idle and events complete when
recorded, while recording, waiting, querying and elapsed_time keep their usual meaning.
"""

import time
from typing import Any

import torch


def stream_classes(module: Any) -> tuple[type, type, type]:
    """(Stream, Event, StreamContext) bound to `module`, an emulated DeviceModule."""

    class Stream(torch.Stream):
        """A stream on an emulated device; `device` defaults to the current device."""

        def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
            module._lazy_init()
            if kwargs:  # (stream_id, device_index, device_type), as torch builds them
                return super().__new__(cls, **kwargs)
            return super().__new__(cls, device=module._device(device), priority=priority)

        @property
        def cuda_stream(self) -> int:
            """What torch.cuda.Stream gives as its raw cudaStream_t: here a number naming the stream (0: the default)."""
            return self.stream_id

    class Event(torch.Event):
        """An event on the current emulated device; elapsed_time needs enable_timing=True."""

        def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> "Event":
            module._lazy_init()
            event = super().__new__(
                cls, device=module._device(None), enable_timing=enable_timing, blocking=blocking,
                interprocess=interprocess,
            )
            event._timing = enable_timing
            return event

        def record(self, stream: torch.Stream | None = None) -> None:
            super().record(module.current_stream() if stream is None else stream)
            self._recorded_ns = time.perf_counter_ns()

        def elapsed_time(self, end_event: torch.Event) -> float:
            """Milliseconds between the two records (work is synchronous, so host time is device time)."""
            # torch.Event.elapsed_time accepts only exact torch.Event objects, not subclasses.
            start, end = getattr(self, "_recorded_ns", None), getattr(end_event, "_recorded_ns", None)
            if start is None or end is None:
                raise ValueError("Both events must be recorded before calculating elapsed time.")
            if not (self._timing and getattr(end_event, "_timing", False)):
                raise ValueError("Both events must be created with argument 'enable_timing=True'.")
            return (end - start) / 1e6

        def wait(self, stream: torch.Stream | None = None) -> None:
            super().wait(module.current_stream() if stream is None else stream)

    class StreamContext:
        """Makes `stream` current, and its device, inside a ``with`` block (as torch.cuda.StreamContext:
        on exit the stream's device gets its previous stream back, then the previous device is current)."""

        def __init__(self, stream: torch.Stream | None) -> None:
            self.stream, self.previous = stream, ()

        def __enter__(self) -> torch.Stream | None:
            if self.stream is not None:
                here = module.current_stream()
                there = module.current_stream(self.stream.device_index)
                self.previous = (there, here) if there.device_index != here.device_index else (here,)
                module.set_stream(self.stream)
            return self.stream

        def __exit__(self, *exc: object) -> None:
            for stream in self.previous:
                module.set_stream(stream)

    return Stream, Event, StreamContext
