"""Who the other ranks of an emulated process group are, to refuse mixed jobs and explain failures.

When a group is created every rank publishes, through the group's store, the device types it
emulates and its process (host and pid). A job whose ranks emulate different device types is
refused there, on every rank. When a collective later fails, gloo only says that a connection
closed or a wait timed out; the peers' processes tell which rank is gone.
"""

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist


class MixedDevicesError(RuntimeError):
    """The ranks of one process group do not emulate the same device types."""


@dataclass(frozen=True)
class Peer:
    rank: int  # in the whole job (the group's rank when the group is the whole job)
    host: str
    pid: int
    emulated: str  # comma-separated device types

    def exited(self) -> bool:
        """True when this rank's process is known to be gone (only knowable on this host)."""
        if self.host != socket.gethostname():
            return False
        try:
            with open(f"/proc/{self.pid}/stat") as stat:
                return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")  # zombie or dead
        except FileNotFoundError:
            return True
        except OSError:  # no /proc: ask the kernel whether the pid exists
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass
            return False


_PUBLISH_LIMIT = timedelta(minutes=2)  # how long peers may take to publish themselves
_lock = threading.Lock()
_groups: dict[str, list[Peer]] = {}  # group name -> its ranks, in group order


def exchange(options: "dist.distributed_c10d._DistributedBackendOptions", emulated: list[str]) -> list[Peer]:
    """Publish this rank, read every other one, refuse mixed device types, remember the group."""
    store, rank, size = options.store, options.group_rank, options.group_size
    global_ranks = list(options.global_ranks_in_group) or list(range(size))
    mine = Peer(global_ranks[rank], socket.gethostname(), os.getpid(), ",".join(emulated))
    store.set(f"torchplug/peer/{rank}", json.dumps(mine.__dict__))
    keys = [f"torchplug/peer/{r}" for r in range(size)]
    try:  # every rank is inside init_process_group by now (the store's rendezvous saw them all)
        store.wait(keys, min(options.timeout, _PUBLISH_LIMIT))
    except Exception as err:
        raise MixedDevicesError(
            f"rank {mine.rank} emulates {mine.emulated} (by its TORCHPLUG_EMULATE), but not every rank of the group joined it as an emulated "
            "rank: one runs without TORCHPLUG_EMULATE, or with another backend. Give every rank the same "
            f"TORCHPLUG_EMULATE and backend. ({err})"
        ) from None
    peers = [mine if r == rank else Peer(**json.loads(store.get(key))) for r, key in enumerate(keys)]
    different = [p for p in peers if p.emulated != mine.emulated]
    if different:
        listing = "; ".join(f"rank {p.rank} emulates {p.emulated or 'nothing'}" for p in different)
        raise MixedDevicesError(
            f"rank {mine.rank} emulates {mine.emulated or 'nothing'} (by its TORCHPLUG_EMULATE) but {listing}. All ranks of a process group must use "
            "the same device type, as on real hardware: give every rank the same TORCHPLUG_EMULATE."
        )
    with _lock:
        _groups[str(options.group_id)] = peers
    return peers


def keep_only(group_names: set[str]) -> None:
    """Forget the groups not named (destroy_process_group has ended them)."""
    with _lock:
        for name in set(_groups) - group_names:
            del _groups[name]


def explain(op_name: str, group_name: str, group_rank: int, error: BaseException | str) -> str:
    """A failed collective's message: which rank exited (or did not take part), then gloo's own words."""
    peers = _groups.get(group_name, [])
    others = [p for i, p in enumerate(peers) if i != group_rank]
    me = peers[group_rank].rank if 0 <= group_rank < len(peers) else group_rank
    gone: list[Peer] = []
    deadline = time.monotonic() + 1.0  # a peer's sockets close a moment before its process is reaped
    while others and not gone and time.monotonic() < deadline:
        gone = [p for p in others if p.exited()]
        if not gone:
            time.sleep(0.05)
    if gone:
        who = ", ".join(f"rank {p.rank} (pid {p.pid})" for p in gone)
        cause = f"{who} exited during the collective"
    elif len(others) == 1:
        cause = f"rank {others[0].rank} did not complete it (its process is still running, or on another host)"
    else:
        cause = f"one of ranks {', '.join(str(p.rank) for p in others)} did not complete it"
    return f"{op_name} failed on rank {me} of process group {group_name!r}: {cause}. gloo reported: {error}"
