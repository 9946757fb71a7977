"""Which ATen ops reach a CPU-only DispatchStub with an emulated device type.

A DispatchStub picks its kernel by the device type of the tensors a kernel hands it; in a CPU build
it has none for xpu or mps (an internal assert, "An unexpected device type was provided xpu"), and
none registered for cuda or PrivateUse1 ("DispatchStub: missing CUDA kernel"). The CPU kernel an
emulated device runs sees host aliases, so only kernels that run with the device's own tensors can
reach one: composite kernels of ops without a CPU kernel. The sweep calls every such op, with
arguments made from its schema in four scalar-type profiles, on the emulated device, and lists
the ops whose call ends in a stub assertion.

    TORCHPLUG_EMULATE=xpu python tests/stub_sweep.py [--device xpu] [--ops REGEX]
"""

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import torch

STUB_ERROR = re.compile(r"unexpected device type was provided|DispatchStub: missing \w+ kernel")
# Arguments in positions after the first tensor get these dtypes (the first keeps float32 except in
# the all-integer and all-bool profiles): the stubs found so far hid behind an integer argument.
PROFILES = {"float": (torch.float32, torch.float32), "int-args": (torch.float32, torch.int64),
            "int": (torch.int64, torch.int64), "bool": (torch.bool, torch.bool)}
SKIPPED = re.compile(r"^aten::(_assert|_print|_nested|_sparse|sparse|_fused_sdp|_fused_adam|_fused_sgd|"
                     r"_foreach|_cufft|_cudnn|cudnn|miopen|_mps|mkldnn|_mkldnn|quantize|_make_per|q_|_fake_quant|"
                     r"fake_quantize|_to_sparse|to_sparse|_validate|_efficientzerotensor|_has_same_storage|set_|"
                     r"resize|_resize|record_stream|_pin_memory|pin_memory|_local_scalar|_nnpack|_weight_int)")


def composite_only_ops() -> list[str]:
    """ATen overloads with a composite-explicit kernel and no CPU kernel: on a device without
    kernels of its own, the composite runs with the device's tensors."""
    def registered(key: str) -> set[str]:
        return set(torch._C._dispatch_get_registrations_for_dispatch_key(key))
    composite = (registered("CompositeExplicitAutograd") | registered("CompositeExplicitAutogradNonFunctional")
                 | registered("CompositeImplicitAutograd"))
    return sorted(n for n in composite - registered("CPU") if n.startswith("aten::") and not SKIPPED.match(n))


def _value(arg: Any, first: bool, profile: tuple[torch.dtype, torch.dtype], device: str) -> Any:
    """A guess at a valid value for one schema argument: a small 2x4 tensor on the device, dims 0."""
    text, name = str(arg.type), arg.name
    dtype = profile[0] if first or name.startswith("out") else profile[1]
    tensor = (torch.arange(1, 9).reshape(2, 4) % 5).to(dtype).to(device)
    if "Device" in text:  # factories: made on the device
        return torch.device(device)
    if text == "List[Tensor]" or text == "List[Optional[Tensor]]":
        return [tensor, tensor.clone()]
    if text == "Tensor":
        return tensor
    if arg.has_default_value():
        return arg.default_value
    if text.startswith("Optional"):
        return tensor if text == "Optional[Tensor]" and name in ("weight", "bias", "other") else None
    if text in ("List[int]", "List[float]"):
        return [0] if "dim" in name else [2, 4]
    return {"int": 0 if "dim" in name else 2, "float": 0.5, "bool": False, "number": 2, "str": "none"}.get(text)


def calls(name: str, device: str) -> Iterator[tuple[str, str, list[Any], dict[str, Any]]]:
    base, _, overload = name.removeprefix("aten::").partition(".")
    schema = torch._C._get_schema(f"aten::{base}", overload)
    for profile_name, profile in PROFILES.items():
        seen_tensor, args, kwargs = False, [], {}
        for arg in schema.arguments:
            value = _value(arg, not seen_tensor, profile, device)
            if arg.kwarg_only:
                kwargs[arg.name] = value
            else:
                args.append(value)
            seen_tensor = seen_tensor or "Tensor" in str(arg.type)
        yield f"{base}.{overload or 'default'}", profile_name, args, kwargs


def _probe(names: list[str], device: str) -> None:
    """Child process: 'start NAME' before each op, 'found NAME DETAIL' for a stub assertion."""
    for name in names:
        print("start", name, flush=True)
        for qualified, profile, args, kwargs in calls(name, device):
            base, overload = qualified.split(".")
            try:
                getattr(getattr(torch.ops.aten, base), overload)(*args, **kwargs)
                print("ran", name, flush=True)
            except Exception as err:  # noqa: BLE001 - any error but a stub's is the schema guess's fault
                if STUB_ERROR.search(str(err)):
                    print("found", name, f"{profile}: {str(err).splitlines()[0][-100:]}", flush=True)
                    break


def sweep(device: str, pattern: str | None) -> tuple[dict[str, str], list[str]]:
    """({op: the stub error} for every op whose call reached a stub, [ops whose call killed the
    process]); how many calls ran goes to stderr. Ops run in a child process; one that dies is noted and the next child goes on after it."""
    names = [n for n in composite_only_ops() if not pattern or re.search(pattern, n)]
    found, crashed, ran, total = {}, [], set(), len(names)
    while names:
        child = subprocess.run([sys.executable, __file__, "--device", device, "--probe", *names],
                               capture_output=True, text=True)
        started = None
        for line in child.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "start":
                started = rest
            elif kind == "ran":
                ran.add(rest)
            elif kind == "found":
                op, _, detail = rest.partition(" ")
                found[op] = detail
        if child.returncode == 0 or started is None:
            break
        crashed.append(started)
        names = names[names.index(started) + 1:]
    print(f"{len(ran)} of {total} ops ran with a guessed argument profile", file=sys.stderr)
    return found, crashed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="xpu")
    parser.add_argument("--ops", help="regular expression over aten::name.overload")
    parser.add_argument("--probe", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import warnings

    warnings.simplefilter("ignore")
    if args.probe is not None:
        _probe(args.probe, args.device)
        return
    found, crashed = sweep(args.device, args.ops)
    print(json.dumps({"stub": found, "crashed": crashed}, indent=1))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
