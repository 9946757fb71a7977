"""Reports: the JSON file is the source of truth; Markdown, HTML and JUnit are derived from it."""

from pathlib import Path
from typing import Any

from .schema import SCHEMA, failed, load, repro_command, repro_snippet, summary, write_json

__all__ = ["SCHEMA", "failed", "load", "repro_command", "repro_snippet", "summary", "write_all", "write_json"]


def write_all(report: dict[str, Any], directory: Path) -> list[Path]:
    """report.json, then the views derived from it."""
    from . import html, junit, markdown

    directory.mkdir(parents=True, exist_ok=True)
    written = [write_json(report, directory / "report.json")]
    for name, view in (("report.md", markdown), ("report.html", html), ("junit.xml", junit)):
        (directory / name).write_text(view.render(report))
        written.append(directory / name)
    return written
