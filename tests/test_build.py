"""`torchplug build`: explicit builds with a progress line, timed apart from doctor's op time."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from conftest import clean_env, run_process
from torchplug import extension
from torchplug.cli.build import about_to_build

TORCHPLUG = Path(sys.executable).parent / "torchplug"  # the console script, as users run it


def test_build_finds_the_cached_extensions_and_rejects_unknown_targets():
    # conftest built the CPU kernels and the dispatcher's C++ half before the session
    result = run_process([TORCHPLUG, "build", "cpu", "--json"], env=clean_env())
    assert [(r["extension"], r["result"]) for r in json.loads(result.stdout)["results"]] == [
        ("torchplug_dispatch", "cached"), ("torchplug_cpu_ext", "cached")]
    assert "not built yet" not in result.stderr
    wrong = run_process([TORCHPLUG, "build", "cpuu"], check=False, env=clean_env())
    assert wrong.returncode == 2 and "unknown target 'cpuu'; choose from dispatcher, emulation, distributed, cpu" in wrong.stderr


def test_only_commands_that_build_silence_the_not_built_warning():
    assert about_to_build(["/venv/bin/torchplug", "build"], backend="cpu")
    assert about_to_build(["/venv/bin/torchplug", "doctor"], backend="cpu")
    assert about_to_build(["torchplug", "doctor", "cpu"], backend="cpu")
    assert not about_to_build(["torchplug", "doctor", "xpu"], backend="cpu")
    assert not about_to_build(["torchplug", "list"], backend="cpu") and not about_to_build(["script.py", "build"])
    assert about_to_build(["torchplug", "doctor", "xpu"])  # a caller that names no backend: any doctor


def test_progress_line_says_what_builds_for_how_long_against_the_last_build(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHPLUG_CACHE", str(tmp_path))
    monkeypatch.setattr(extension, "_PROGRESS_EVERY_S", 0.05)
    assert extension.last_build_seconds("demo_ext") is None
    with extension._progress("demo_ext"):
        extension.time.sleep(0.2)
    assert "torchplug: building 'demo_ext': 0 s elapsed (no earlier build here to compare with)" in capsys.readouterr().err
    extension._record_build_seconds("demo_ext", 41.96)
    assert extension.last_build_seconds("demo_ext") == 42.0
    with extension._progress("demo_ext"):
        extension.time.sleep(0.2)
    assert "(the last build here took 42 s)" in capsys.readouterr().err


@pytest.mark.slow
def test_doctor_builds_into_a_fresh_cache_without_warning_and_times_the_build_apart(tmp_path):
    result = run_process([TORCHPLUG, "doctor", "cpu"], timeout=1800, env=clean_env(TORCHPLUG_CACHE=str(tmp_path)))
    assert "not built yet" not in result.stderr and "torchplug: building 'torchplug_cpu_ext'" in result.stderr
    cpu = next(line for line in result.stdout.splitlines() if line.startswith("cpu "))
    built = re.search(r"; built ([\w, ]+) first: \d+ s\)", cpu)
    assert "PASS" in cpu and built and set(built[1].split(", ")) == {"torchplug_dispatch", "torchplug_cpu_ext"}, cpu


# A cold `torchplug build --all` is mostly torch's headers and the optimisation of glue: the glue is
# compiled at -O1 and without every op's declaration, the kernels apart at -O3.

def _compiled(build_directory: Path) -> tuple[list[str], list[str]]:
    """The compiler flags and the files compiled in one extension's build directory."""
    ninja = (build_directory / "build.ninja").read_text()
    flags = re.search(r"^cflags = (.*)$", ninja, re.M)[1].split()
    return flags, sorted(Path(source).name for source in re.findall(r"^build \S+\.o: compile (\S+)$", ninja, re.M))


def test_glue_compiles_at_O1_and_the_cpu_kernels_apart_at_O3(tmp_path):
    from torchplug.dispatcher.cpp import extension as dispatcher
    from torchplug_cpu import kernels

    flags, files = _compiled(Path(dispatcher().__file__).parent)  # glue only: -O1 on the command line
    assert {"-O1", "-finline-small-functions"} <= set(flags) and "-O3" not in flags and files == ["unity.cpp"]
    build = Path(kernels.extension().__file__).parent
    flags, files = _compiled(build)
    main_kernels = [name for name in kernels.KERNEL_SOURCES if name not in kernels.TEST_PATH_SOURCES]
    assert "-O3" in flags and files == sorted(["unity.cpp", *main_kernels]) and "isa_avx512emu.cpp" not in files
    unity = (build / "unity.cpp").read_text()
    assert unity.startswith('#pragma GCC optimize("O1", "inline-small-functions")') and not any(f"/{name}" in unity for name in files)
    # ... and no glue file pulls in every op's declaration (ATen/Functions.h; ATen/native/Resize.h did)
    # The cache is shared by source content: the cached unity may name the same sources in another
    # environment (since deleted), so it is read with this environment's copies of them.
    roots = [Path(kernels.__file__).parent, Path(dispatcher().__file__).parent]
    here = re.sub(r'#include "(/[^"]+)"', lambda m: '#include "{}"'.format(
        next(p for root in roots for p in root.rglob(Path(m[1]).name))), unity)
    (tmp_path / "unity.cpp").write_text(here)
    torch_root = str(Path(torch.__file__).parent)
    flags = [re.sub(r"^/\S*/torch(?=/include)", torch_root, flag) for flag in flags]  # torch's headers, here
    headers = run_process(["c++", *flags, "-M", tmp_path / "unity.cpp"], cwd=build).stdout
    assert "ATen/Functions.h" not in headers and "ATen/ops/empty.h" in headers


def test_the_avx512emu_test_path_is_compiled_apart_the_first_time_it_is_selected():
    from torchplug_cpu import kernels

    previous = kernels.current_isa()
    assert kernels.select_isa("avx512emu") == "avx512emu"  # builds it here the first time
    try:
        a, b = torch.randn(37, 129).half(), torch.randn(129, 67).half()
        assert ((a @ b).double() - a.double() @ b.double()).abs().max() < 0.1
    finally:
        kernels.select_isa(previous)
    flags, files = _compiled(Path(kernels.test_path().__file__).parent)
    assert "-O3" in flags and files == ["isa_avx512emu.cpp", "unity.cpp"]
