"""C++ extensions: built once, then imported from the cache without torch.utils.cpp_extension."""

import shutil

from conftest import REPO, run_python

from torchplug.dispatcher.cpp import _SOURCES, extension

CSRC = REPO / "dispatcher" / "csrc"
SOURCE_NAMES = [source.name for source in _SOURCES]


def test_a_cached_build_loads_without_the_compiler_toolchain():
    extension()  # builds once if this machine has no cached build yet
    out = run_python("""
        import sys, torch
        from torchplug.dispatcher.cpp import extension
        extension()
        print("torch.utils.cpp_extension" in sys.modules)
    """).stdout
    assert out.strip() == "False"


def test_a_changed_source_header_or_flag_makes_the_cache_stale(tmp_path):
    extension()
    for name in [*SOURCE_NAMES, "dispatch.h"]:
        shutil.copy(CSRC / name, tmp_path / name)

    def cache_hit(*flags: str) -> bool:
        """Whether a fresh process would import the cached build for the copied sources."""
        return run_python(f"""
            import torch
            from pathlib import Path
            from torchplug.extension import load_cached
            sources = [Path({str(tmp_path)!r}) / name for name in {SOURCE_NAMES!r}]
            print(load_cached("torchplug_dispatch", sources, extra_cflags={list(flags)!r}) is not None)
        """, TORCHPLUG_DISABLE="cpu").stdout.strip() == "True"  # the CPU plugin would import it first

    assert cache_hit()  # same file names and contents: the cached build is used
    assert not cache_hit("-DOTHER")  # other flags
    (tmp_path / "dispatch.h").write_text((tmp_path / "dispatch.h").read_text() + "\n// changed\n")
    assert not cache_hit()  # a changed header
