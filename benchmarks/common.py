"""Shared pieces of the benchmark scripts: medians, a plain table, a child process's environment."""

import os
import statistics
from collections.abc import Sequence


def clean_env(**overrides: str) -> dict[str, str]:
    """This environment without the caller's TORCHPLUG_* settings, plus `overrides`: what a
    measured child process runs with, so only the benchmark decides torchplug's configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    return {**env, **overrides}


def median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1e3


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for i, row in enumerate(cells):
        print(" | ".join(cell.rjust(width) for cell, width in zip(row, widths)))
        if i == 0:
            print("-+-".join("-" * width for width in widths))
