"""Plain-text tables for the CLI and trace reports: left-aligned columns, two spaces apart."""

from collections.abc import Sequence


def format_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    lines = [[str(cell) for cell in line] for line in [header, *rows]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)
