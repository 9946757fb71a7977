"""Shared pieces of the benchmark scripts: medians and a plain table."""

import statistics
from collections.abc import Sequence


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1e3


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for i, row in enumerate(cells):
        print(" | ".join(cell.rjust(width) for cell, width in zip(row, widths)))
        if i == 0:
            print("-+-".join("-" * width for width in widths))
