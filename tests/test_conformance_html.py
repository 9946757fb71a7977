"""report.html is readable: every status's text stands out from its colour (WCAG AA, 4.5:1), in the
legend and in the grid the page's script draws, checked in a real browser where one is installed."""

import re
import shutil
import subprocess

import pytest

from torchplug.conformance.verdicts import status
from torchplug.conformance.report import html

AA = 4.5  # WCAG 2 level AA, normal-size text


def luminance(colour: str) -> float:
    """WCAG 2's relative luminance of an sRGB colour #rrggbb."""
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_contrast_matches_wcag_reference_values():
    assert contrast("#ffffff", "#000000") == pytest.approx(21.0)
    assert contrast("#ffffff", "#777777") == pytest.approx(4.48, abs=0.01)  # the grey just below AA


def report_with_every_status() -> dict:
    cases = [{"op": f"op_{name}", "dtype": "float32", "mode": "eager", "sample": 0, "status": name, "detail": name,
              "repro": f"torchplug check xpu --op op_{name}", "manifest_reason": "", "max_abs": None}
             for name in status.STATUSES]
    return {
        "backend": {"name": "xpu", "device": "xpu", "mode": "emulated", "codegen": "-", "isa": "-"},
        "versions": {"torch": "2.13.0", "torchplug": "0.1.0"}, "selection": {"tier": "smoke"}, "wall_s": 1.0,
        "created": "today", "summary": {"eager": {"counts": {s: 1 for s in status.STATUSES}, "pass_rate": 1.0,
                                                  "judged": 1}},
        "unsupported_modes": {}, "runtime_checks": [], "cases": cases,
    }


COLOURED = re.compile(r'<(span|td)[^>]*style="background:\s*(#[0-9a-f]{6});\s*color:\s*(#[0-9a-f]{6})"[^>]*>([\w-]+)<')


def test_every_status_in_the_legend_reads_at_aa_contrast():
    shown = {name: (background, text) for _, background, text, name in COLOURED.findall(html.render(report_with_every_status()))}
    assert set(shown) == set(status.STATUSES)
    low = {name: round(contrast(*pair), 2) for name, pair in shown.items() if contrast(*pair) < AA}
    assert not low, f"status colours below {AA}:1 contrast: {low}"


BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")
def test_the_grid_the_browser_draws_reads_at_aa_contrast(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(html.render(report_with_every_status()))
    dom = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    cells = [(background, text, name) for tag, background, text, name in COLOURED.findall(dom) if tag == "td"]
    assert {name for *_, name in cells} == set(status.STATUSES), dom[-2000:]  # the script drew every status
    low = {name: round(contrast(background, text), 2) for background, text, name in cells
           if contrast(background, text) < AA}
    assert not low, f"grid cells below {AA}:1 contrast: {low}"
