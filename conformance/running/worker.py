"""A worker process: runs groups of cases for one backend and streams results to the runner.

Protocol (JSON lines): the runner writes requests on stdin; the worker answers on a private copy
of its stdout (fd 1 itself is pointed at stderr, so prints from ops and plugins cannot corrupt the
stream). Before each case it says `start`, so a crash or hang is pinned on that case.

  -> {"group": {"op", "dtype", "modes": {mode: [sample indices] | null (all)}, "done": [keys]}}
  -> {"checks": [runtime check names]}
  <- {"hello": {...backend info}} | {"fatal": message}
  <- {"relevant": [overloads]}  (once, after hello, on emulated devices: exercised.py)
  <- {"start": key}  {"side": "reference"} {"side": "device"}  {"result": CaseResult json}
     {"overloads": [newly exercised]} | {"check": {...}}  ...  {"idle": true}

The side messages bracket every run of the CPU reference, so the runner blames a crash or hang
there on torch's CPU kernel, not on the device under test.
"""

import contextlib
import faulthandler
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any, TextIO

from ..cases.case import Case, CaseResult
from ..modes.sides import Skip, Unsupported, first_line
from ..target import synchronize

SUITE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # conformance/


def _send(stream: TextIO, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def _selected(indices: list[int] | None, count: int) -> Iterator[int]:
    yield from range(count) if indices is None else (i for i in indices if i < count)


def announce_reference(target: Any, out: TextIO) -> None:
    """Make the target's CPU-reference context tell the runner when the reference starts and ends."""
    reference = target.reference

    @contextlib.contextmanager
    def announced() -> Iterator[None]:
        _send(out, {"side": "reference"})
        try:
            with reference():
                yield
        finally:
            _send(out, {"side": "device"})

    target.reference = announced


def run_case(case: Case, entry: Any, sample: Any, target: Any) -> CaseResult:
    from ..modes import mode
    from ..verdicts import fallback

    start = time.perf_counter()
    fallen_back = fallback.uses(target.backend)
    try:
        verdict = mode(case.mode).run(entry, sample, target)
        synchronize(target)  # an asynchronous device error (a GPU kernel's assert) belongs to this case
        status = "pass" if verdict.ok else "fail"
        result = CaseResult(case, status, verdict.detail, verdict.max_abs, verdict.max_rel, verdict.mismatches,
                            arbitrated=verdict.arbitrated)
    except Skip as why:
        result = CaseResult(case, "skip", str(why))
    except Unsupported as why:
        dtype_refused = str(why).startswith("the device refuses")
        result = CaseResult(case, "unsupported-dtype" if dtype_refused else "unsupported", str(why))
    except Exception as err:
        # Where the error came from, when that is Python code outside the suite (a plugin's kernel, torch).
        frames = [f for f in traceback.extract_tb(err.__traceback__) if SUITE_DIR not in f.filename]
        where = f" (at {frames[-1].name}, {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
        result = CaseResult(case, "fail", f"{type(err).__name__}: {first_line(err)}{where}")
    result.time_s = round(time.perf_counter() - start, 4)
    result.fallback_ops = dict(fallback.uses(target.backend) - fallen_back)  # judged with the manifest (fallback.py)
    return result


def usable(target: Any) -> bool:
    """Whether the device still runs work: CUDA errors such as a device-side assert are sticky."""
    try:
        synchronize(target)
    except Exception:
        return False
    return True


def run_group(request: dict[str, Any], target: Any, out: TextIO, recorder: Any = None) -> None:
    import torch

    from ..cases import opinfo
    from ..modes import inputs_for

    name, dtype_name, done = request["op"], request["dtype"], set(request.get("done", ()))
    planned: dict[str, list[int] | None] = request["modes"]
    try:
        entry = opinfo.find(name)
        inputs = inputs_for(entry, getattr(torch, dtype_name), planned, target.device.type)
    except Exception as err:
        for mode in planned:
            case = Case(name, dtype_name, mode, 0)
            _send(out, {"result": CaseResult(case, "skip", f"no samples: {type(err).__name__}: "
                                                           f"{str(err).splitlines()[0][:200]}").to_json()})
        return
    for mode, indices in planned.items():
        for index in _selected(indices, len(inputs[mode])):
            case = Case(name, dtype_name, mode, index)
            if case.key in done:
                continue
            _send(out, {"start": case.key})
            result = run_case(case, entry, inputs[mode][index], target)
            _send(out, {"result": result.to_json()})
            if recorder is not None and (fresh := recorder.fresh()):
                _send(out, {"overloads": fresh})
            # run_case synchronised already: only a failed case can have left a sticky error (a GPU context
            # after a device-side assert), which would fail every later case
            if result.status == "fail" and not usable(target):
                _send(out, {"retire": f"the device is unusable after {case.key}"})
                out.close()
                os._exit(0)


def main() -> None:
    backend_name = sys.argv[1]
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints (ours, torch's, a plugin's C++) go to stderr
    sys.stdout = sys.stderr
    faulthandler.enable()
    import warnings

    warnings.simplefilter("ignore")  # one-time notices would repeat in every worker
    try:
        from ..target import open_target

        target, info = open_target(backend_name)
        from ..cases import opinfo

        opinfo.all_ops()
    except Exception as err:
        _send(out, {"fatal": f"{type(err).__name__}: {err}"})
        return
    announce_reference(target, out)
    _send(out, {"hello": info})
    recorder = None
    if info["mode"] == "emulated":  # exercised.py: only the emulated runtime notes what reaches the device
        from .exercised import Recorder, relevant_overloads

        _send(out, {"relevant": relevant_overloads(info["dispatch_key"])})
        recorder = Recorder()
    for line in sys.stdin:
        request = json.loads(line)
        if "group" in request:
            run_group(request["group"], target, out, recorder)
        elif "checks" in request:
            from .runtime_checks import run_check

            for name in request["checks"]:
                _send(out, {"start": f"check:{name}"})
                _send(out, {"check": run_check(name, target)})
        _send(out, {"idle": True})


if __name__ == "__main__":
    main()
