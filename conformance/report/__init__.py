"""Reports: the JSON file is the source of truth; Markdown, HTML and JUnit are derived from it."""

from pathlib import Path
from typing import Any

from .schema import SCHEMA, load, repro_command, repro_snippet, summary, write_json

__all__ = ["SCHEMA", "load", "repro_command", "repro_snippet", "summary", "write_all", "write_json"]


def write_all(report: dict[str, Any], directory: Path) -> list[Path]:
    """report.json, then the views derived from it."""
    from .markdown import render as markdown

    directory.mkdir(parents=True, exist_ok=True)
    written = [write_json(report, directory / "report.json")]
    (directory / "report.md").write_text(markdown(report))
    written.append(directory / "report.md")
    return written
