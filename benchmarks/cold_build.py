"""Cold build of every C++ extension: CPU time (user + sys) and wall time, this tree against a reference.

    python benchmarks/cold_build.py [--reference REV] [--json PATH]

Each tree builds `torchplug build <target>` for every target, one child process per target, into
an empty TORCHPLUG_CACHE, so nothing is reused. With --reference, the git revision REV (for
example `main` or a commit before a change) is checked out into a temporary worktree and built
the same way, alternating with this tree target by target, so machine load hits both alike. The
table gives each target's CPU and wall seconds and the ratio this/reference; the load average is
printed before and after. The children import the tree's own torchplug and torchplug-cpu from
the source folders (the installed distributions only provide the entry points).

Verdict (with --reference): this tree's total CPU time is at most a third of the reference's.
"""

import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from common import Report, clean_env, parser

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("dispatcher", "emulation", "distributed", "cpu")  # cpu after dispatcher, which it reuses


@contextmanager
def checkout(revision: str):
    """A temporary worktree of `revision`."""
    with tempfile.TemporaryDirectory(prefix="torchplug-reference-") as folder:
        tree = Path(folder) / "tree"
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", tree, revision], check=True,
                       capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], capture_output=True)


def importable(tree: Path, shim: Path) -> str:
    """A PYTHONPATH under which `torchplug` and `torchplug_cpu` are the tree's source folders."""
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "torchplug").symlink_to(tree, target_is_directory=True)
    return os.pathsep.join([str(shim), str(tree / "devices" / "cpu")])


def build(target: str, pythonpath: str, cache: Path) -> tuple[float, float]:
    """(CPU seconds of the child and its compilers, wall seconds) of one cold `torchplug build target`."""
    code = f"import sys; from torchplug.entrypoints.cli import main; sys.exit(main(['build', {target!r}]))"
    env = clean_env(PYTHONPATH=pythonpath, TORCHPLUG_CACHE=str(cache))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"torchplug build {target} failed with PYTHONPATH={pythonpath}:\n{result.stderr[-3000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--reference", metavar="REV", help="also build this git revision, alternating with this tree")
    args = cli.parse_args()
    report = Report("cold_build", args)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in report.load_before)}")
    with tempfile.TemporaryDirectory(prefix="torchplug-cold-") as scratch, \
            (checkout(args.reference) if args.reference else _nothing()) as reference:
        trees = {"this": importable(REPO, Path(scratch) / "this-shim")}
        if reference is not None:
            trees["reference"] = importable(reference, Path(scratch) / "reference-shim")
        seconds: dict[str, dict[str, tuple[float, float]]] = {name: {} for name in trees}
        for target in TARGETS:
            for name, pythonpath in (reversed(trees.items()) if reference is not None else trees.items()):
                seconds[name][target] = build(target, pythonpath, Path(scratch) / f"{name}-cache")
                print(f"  {name:9} {target:11} cpu {seconds[name][target][0]:6.1f} s  wall {seconds[name][target][1]:6.1f} s",
                      flush=True)
    rows = []
    for target in (*TARGETS, "total"):
        picked = {name: (sum(v[0] for v in s.values()), sum(v[1] for v in s.values())) if target == "total"
                  else s[target] for name, s in seconds.items()}
        for name, (cpu, wall) in picked.items():
            report.add(f"{name} {target} cpu", [cpu], "s")
            report.add(f"{name} {target} wall", [wall], "s")
        row = [target, f"{picked['this'][0]:.1f}", f"{picked['this'][1]:.1f}"]
        if "reference" in picked:
            ref_cpu, ref_wall = picked["reference"]
            row = [target, f"{ref_cpu:.1f}", f"{picked['this'][0]:.1f}", f"{picked['this'][0] / ref_cpu:.3f}",
                   f"{ref_wall:.1f}", f"{picked['this'][1]:.1f}"]
        rows.append(row)
    header = (["target", "reference CPU s", "this CPU s", "CPU ratio", "reference wall s", "this wall s"]
              if reference is not None else ["target", "CPU s", "wall s"])
    report.table(header, rows)
    if reference is not None:
        ratio = sum(v[0] for v in seconds["this"].values()) / sum(v[0] for v in seconds["reference"].values())
        report.verdict(ratio <= 1 / 3, f"total CPU time {ratio:.3f}x the reference's (at most 1/3)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return report.finish()


@contextmanager
def _nothing():
    yield None


if __name__ == "__main__":
    sys.exit(main())
