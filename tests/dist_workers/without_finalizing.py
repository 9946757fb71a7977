"""Run a script as __main__ (`without_finalizing.py SCRIPT ARGS...`), then exit without finalizing.

For the plain-CPU reference runs only. torch's gloo worker threads may drop their last reference
to a collective's tensors while CPython finalizes, which aborts the process after a successful run
("terminate called without an active exception"). torchplug settles its own emulated-device work
before exit (distributed/csrc/device_work.cpp); torch does not do the same for gloo's CPU work.
The reference is not what the tests check, so its processes skip finalization.
"""

import os
import runpy
import sys

sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
