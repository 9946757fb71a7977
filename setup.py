"""An opt-in build of torchplug's C++ extensions while pip installs it (metadata: pyproject.toml).

    TORCHPLUG_BUILD_AT_INSTALL=1 pip install --no-build-isolation ./

compiles the dispatcher, emulation and distributed extensions into the build cache
(~/.cache/torchplug, or $TORCHPLUG_CACHE) against the torch installed in the environment, so the
first use of the installed package finds them built: what a container image wants. It needs torch
importable while the wheel is built, hence --no-build-isolation. The cache key is the sources'
content, so the installed copy finds these builds. Without the variable nothing is compiled.
"""

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

TARGETS = ["dispatcher", "emulation", "distributed"]


class BuildPyThenExtensions(build_py):
    def run(self) -> None:
        super().run()
        if os.environ.get("TORCHPLUG_BUILD_AT_INSTALL") != "1":
            return
        code = f"import sys; from torchplug.cli import main; sys.exit(main(['build', *{TARGETS!r}]))"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [self.build_lib, os.environ.get("PYTHONPATH")]))}
        if subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True).returncode != 0:
            raise SystemExit("TORCHPLUG_BUILD_AT_INSTALL=1 needs torch importable while the wheel is built: install "
                             "torch first, then pip install --no-build-isolation ./")
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=self.build_lib)


setup(cmdclass={"build_py": BuildPyThenExtensions})
