"""One benchmark script of two checkouts, run in alternation: does a change keep the figures?

    python benchmarks/side_by_side.py --before DIR [--after DIR] [--runs 5] [--json PATH] -- SCRIPT [ARGS...]

Runs `DIR/benchmarks/SCRIPT ARGS --json ...` with each checkout's own interpreter (DIR/.venv/bin/python,
or --before-python / --after-python), before and after alternating, `--runs` times each, so machine
load hits both alike. The table gives each figure's median over the runs (of the script's own
medians) before and after, and after / before. The scripts' own ratios (emulated / cpu, ...) are
measured within one process and are the steadier figures to compare.

Verdict (exit status 1 if not): each of those ratios (the script's figures in x) moves by at most
0.05 of its value, after / before within 0.95 to 1.05: the change kept the figures.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import Measurement, Report, clean_env, parser

HERE = Path(__file__).resolve().parent
MATCH_TARGET = 0.05  # how far a ratio the script reports may move, as a share of its value


def run_once(checkout: Path, python: Path, script: str, arguments: list[str]) -> dict[str, tuple[float, str]]:
    """The script's figures (name -> (median, unit)) from one run in `checkout`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        command = [str(python), str(checkout / "benchmarks" / script), *arguments, "--json", str(out)]
        # Exit status 1 means a verdict failed; the figures are still what this comparison wants.
        result = subprocess.run(command, env=clean_env(), cwd=checkout / "benchmarks", capture_output=True, text=True)
        if not out.exists():
            sys.exit(f"{' '.join(command)} wrote no figures (exit {result.returncode}):\n{result.stderr[-2000:]}")
        return {m["name"]: (m["median"], m["unit"]) for m in json.loads(out.read_text())["measurements"]}


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--before", type=Path, required=True, help="the checkout measured as 'before'")
    cli.add_argument("--after", type=Path, default=HERE.parent, help="the checkout measured as 'after' (default: this one)")
    cli.add_argument("--before-python", type=Path, help="its interpreter (default: BEFORE/.venv/bin/python)")
    cli.add_argument("--after-python", type=Path, help="its interpreter (default: AFTER/.venv/bin/python)")
    cli.add_argument("--runs", type=int, default=5, help="runs of the script per checkout, alternating (default: 5)")
    cli.add_argument("script", help="a script in benchmarks/, e.g. emulation.py")
    cli.add_argument("arguments", nargs="*", help="its arguments (after --)")
    args = cli.parse_args()
    sides = {"before": (args.before, args.before_python or args.before / ".venv" / "bin" / "python"),
             "after": (args.after, args.after_python or args.after / ".venv" / "bin" / "python")}
    runs: dict[str, list[dict[str, tuple[float, str]]]] = {side: [] for side in sides}
    for _ in range(args.runs):
        for side, (checkout, python) in sides.items():
            runs[side].append(run_once(checkout.resolve(), python, args.script, args.arguments))

    report = Report("side_by_side", args)
    rows, ratios = [], []
    for name, (_, unit) in runs["before"][0].items():
        figures = {side: report.add(f"{name}, {side}", [run[name][0] for run in runs[side] if name in run], unit)
                   for side in sides}
        change: Measurement = report.record(figures["after"].ratio(figures["before"], f"{name}, after / before"))
        rows.append([name, figures["before"].cell, figures["after"].cell, change.cell])
        if unit == "x":
            ratios.append(change)
    report.table(["figure (median of the runs' medians)", "before", "after", "after / before"], rows)
    for change in ratios:
        report.verdict(abs(change.median - 1) <= MATCH_TARGET,
                       f"{change.name} = {change.median:.3f} (within 1 +- {MATCH_TARGET})", change)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
