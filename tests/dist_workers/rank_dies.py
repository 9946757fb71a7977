"""A rank dies in the middle of a job; the survivors must raise, naming it, within the group's timeout.

argv: device type, "exit" (the dying rank starts a large all_reduce and exits in the middle of it)
or "hang" (it stays alive but never joins). Reports each survivor's error and how long it took.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

from job import init, report

device_type, how = sys.argv[1], sys.argv[2]
rank = init()
device = torch.device(device_type, 0)
t = torch.ones(1 << 22, device=device)  # 16 MiB: gloo moves it in many pieces
dist.all_reduce(t)  # the job works until the rank dies
victim = dist.get_world_size() - 1
if rank == victim:
    if how == "hang":  # outlive the survivors' timeout, then go
        time.sleep(float(os.environ["TORCHPLUG_TEST_PG_TIMEOUT"]) + 5)
    else:
        dist.all_reduce(t, async_op=True)
    os._exit(17)
start = time.monotonic()
try:
    dist.all_reduce(t)
    outcome = {"raised": None}
except Exception as err:
    outcome = {"raised": type(err).__name__, "message": str(err)}
report({"rank": rank, "seconds": time.monotonic() - start, **outcome})
os._exit(0)  # the group is broken: skip the collective teardown
