"""What an emulated device records while a graph captures, what it refuses, and how it replays.

A GPU records the kernels a capturing stream launches without running them, and a replay launches
them again on the same memory. An emulated device's kernels are ATen ops (run on host memory by the
runtime's fallback and per-op kernels) and the host kernels Inductor generates, so:

* A TorchDispatchMode on the capturing thread sees every ATen op, and so does autograd's device
  thread (torch carries the mode over in its thread-local state): backward captures too. An op is
  recorded when the current stream of its device is capturing (csrc/graphs.cpp knows which streams
  are); other ops run as usual. Inductor's generated code reports its kernel launches through
  `launch_host_kernel`.
* A recorded op still runs, since its results' shapes and the Python code after it depend on it.
  What it wrote into memory that held data when the capture began (parameters an optimizer step
  updates, a buffer a copy fills, an input freed during the capture whose block a result reuses)
  is put back when the capture ends, and so is the device's random generator: as on a GPU, only
  replays take effect.
* Recorded tensors become non-owning views of the memory they used. The graph's own allocations come
  from its private pool, which keeps them reserved (csrc/graphs.cpp); memory from elsewhere must
  still belong to the same storage at replay, which refuses to read freed memory where a GPU would
  read it anyway.
* A replay runs each op again on those views: ops that write their arguments write them again, and
  an op's fresh results are copied into the tensors the capture returned, so static outputs update
  in place. Random ops draw from the device's generator, so each replay gives new numbers.
* Refused as on a GPU: reading device values on the host (.item(), .cpu(), printing), ops whose
  output size depends on the data (nonzero, masked_select, unique, boolean indexing), and blocking
  copies between host and device; csrc/graphs.cpp refuses synchronizing and allocating outside the
  pool.
"""

import ctypes
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map_only

from ..entrypoints.torch_devices import TORCH_DEVICE_TYPES
from . import runtime

UNSUPPORTED, INVALIDATED = 900, 901  # cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated
# device types torch has a graph API for -> dispatch keys
GRAPH_KEYS = {t.name: t.dispatch_key for t in TORCH_DEVICE_TYPES.values() if t.graphs}

_PLAIN = torch._C._disabled_torch_dispatch_impl  # torch.Tensor's and Parameter's __torch_dispatch__
_recordings: dict[int, "Recording"] = {}  # capture id -> its recording
_local = threading.local()  # per thread: the Recorder mode and how many captures use it; replaying

_SYNC = "so it waits for the capturing stream, which a capture forbids"
_HOST_READ = (f"reads a device value on the host (.item(), .tolist(), bool(), int() or float() of a device "
              f"tensor, or printing it), {_SYNC}",
              "Keep the value on the device (torch.where instead of an `if`), or read it after a replay.")
_DATA_SIZED = (f"returns a tensor whose size depends on the data: the device copies a count to the host, {_SYNC}",
               "Inside a graph use a fixed-size form (torch.nonzero_static, masked_fill, torch.where).")
_REFUSED = {
    "aten::_local_scalar_dense": _HOST_READ,
    "aten::equal": _HOST_READ,
    "aten::nonzero": _DATA_SIZED,
    "aten::masked_select": _DATA_SIZED,
    "aten::_unique": _DATA_SIZED,
    "aten::_unique2": _DATA_SIZED,
    "aten::unique_dim": _DATA_SIZED,
    "aten::unique_consecutive": _DATA_SIZED,
    "aten::unique_dim_consecutive": _DATA_SIZED,
    "aten::bincount": (f"reads the largest value on the host to size its result, {_SYNC}",
                       "Pass minlength and compute counts with scatter_add_ inside a graph."),
    "aten::_linalg_check_errors": (f"checks the factorization's info tensor on the host, {_SYNC}",
                                   "Use the *_ex variant (torch.linalg.inv_ex, cholesky_ex, ...) inside the "
                                   "graph and check info after a replay."),
    "aten::lift_fresh": (f"(torch.tensor(data, device=...)) copies host data to the device and waits, {_SYNC}",
                         "Create the tensor before the capture and copy into it, or use torch.full on the device."),
}
_INDEXING = {"aten::index", "aten::_unsafe_index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
             "aten::_unsafe_index_put"}
_COPIES = {"aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::_to_copy"}
# Ops whose results need no work on replay: uninitialized memory, stream bookkeeping.
_NOT_REPLAYED = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                 "aten::new_empty_strided", "aten::empty_permuted", "aten::record_stream"}


def refusal(func: Any, args: tuple, kwargs: dict) -> tuple[str, str] | None:
    """(why, how to fix) when a GPU refuses `func` on a capturing stream, else None."""
    name = func._schema.name
    found = _REFUSED.get(name)
    if found is not None:
        if name == "aten::lift_fresh" and not (args and args[0].device.type in GRAPH_KEYS):
            return None
        why, hint = found
        return f"{name} {why}", hint
    if name == "aten::repeat_interleave" and func._overloadname == "Tensor" and kwargs.get("output_size") is None:
        return (f"{name} without output_size {_DATA_SIZED[0]}", "Pass output_size= inside a graph.")
    if name in _INDEXING:
        return _index_refusal(name, args[1] if len(args) > 1 else kwargs.get("indices", ()))
    if name in _COPIES:
        return _copy_refusal(name, args, kwargs)
    return None


def _index_refusal(name: str, indices: Any) -> tuple[str, str] | None:
    for index in indices or ():
        if not isinstance(index, torch.Tensor):
            continue
        if index.dtype in (torch.bool, torch.uint8):
            return (f"{name} with a boolean mask {_DATA_SIZED[0]}",
                    "Use torch.where or masked_fill instead of boolean indexing inside a graph.")
        if index.device.type == "cpu" and index.dim() > 0:
            return (f"{name} with an index tensor in host memory copies it to the device and waits, {_SYNC}",
                    "Move the index tensor to the device before the capture.")
    return None


def _copy_refusal(name: str, args: tuple, kwargs: dict) -> tuple[str, str] | None:
    if name == "aten::_to_copy":
        source = args[0]
        target = torch.device(kwargs.get("device") or source.device)
        non_blocking = kwargs.get("non_blocking", False)
        host = source if source.device.type == "cpu" else None
    else:
        target_tensor, source = (args[0], args[1]) if name == "aten::copy_" else (args[1], args[0])  # _copy_from(src, dst)
        target = target_tensor.device
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        host = source if source.device.type == "cpu" else target_tensor if target.type == "cpu" else None
    if (source.device.type == "cpu") == (target.type == "cpu"):
        return None  # device to device: a copy kernel like any other
    pinned = host is None or host.is_pinned()  # a device-to-host _to_copy with non_blocking pins its result
    if non_blocking and pinned:
        return None
    return (f"{name} copies between host memory and the device ({source.device} -> {target}) "
            f"{'with pageable host memory' if non_blocking else 'with non_blocking=False'}, {_SYNC}",
            "Copy new inputs into the graph's static tensors before replay() and read outputs after it; inside "
            "a capture only non_blocking copies to or from pinned memory are allowed.")


class Ref:
    """A tensor a recorded op used: where its memory is, and its view; `tensor` is built by instantiate."""

    __slots__ = ("ptr", "nbytes", "dtype", "size", "stride", "offset", "device", "conj", "neg", "weak", "origin",
                 "tensor")

    def __init__(self, t: torch.Tensor, weak: Any = None, origin: str | None = None) -> None:
        storage = t.untyped_storage()
        self.ptr, self.nbytes = storage.data_ptr(), storage.nbytes()
        self.dtype, self.size, self.stride, self.offset = t.dtype, tuple(t.shape), t.stride(), t.storage_offset()
        self.device, self.conj, self.neg = t.device, t.is_conj(), t.is_neg()
        self.weak, self.origin = weak, origin
        self.tensor: torch.Tensor | None = None

    @classmethod
    def holding(cls, t: torch.Tensor) -> "Ref":
        """Host memory: the graph keeps the tensor itself, as a GPU's graph keeps its pinned buffers."""
        ref = cls(t)
        ref.tensor = t
        return ref

    def build(self) -> None:
        if self.tensor is not None:
            return
        storage = torch._C._construct_storage_from_data_pointer(self.ptr, self.device, self.nbytes)
        t = torch.empty((0,), dtype=self.dtype, device=self.device).set_(storage, self.offset, self.size, self.stride)
        if self.conj:
            t = t.conj()
        if self.neg:
            t = t._neg_view()
        self.tensor = t

    def alive(self) -> bool:
        """Whether memory the graph does not own still belongs to the storage it read at capture."""
        return self.weak is None or runtime.extension().graph_storage_data(self.weak.cdata) == self.ptr


class OpNode:
    """An ATen op: run again on the recorded views. Its fresh results go into the tensors the capture
    returned: written there directly by the op's out= overload when it has one, as a GPU kernel writes
    its output buffer, else computed and copied in."""

    __slots__ = ("func", "args", "kwargs", "targets", "reads", "writes", "out")

    def __init__(self, func: Any, args: Any, kwargs: Any, targets: list[tuple[int, Ref]], reads: list[Ref],
                 writes: list[Ref]) -> None:
        self.func, self.args, self.kwargs, self.targets = func, args, kwargs, targets
        self.reads, self.writes = reads, writes
        self.out: tuple[Any, dict[str, torch.Tensor]] | None = None

    @property
    def name(self) -> str:
        return str(self.func)

    def bind(self) -> None:
        self.args, self.kwargs = tree_map_only(Ref, _tensor_of, (self.args, self.kwargs))
        found = _out_overload(self.func, len(self.targets))
        if found is not None and [index for index, _ in self.targets] == list(range(len(self.targets))):
            overload, names = found
            self.out = overload, {name: target.tensor for name, (_, target) in zip(names, self.targets)}

    def run(self) -> None:
        if self.out is not None:
            overload, outs = self.out
            overload(*self.args, **self.kwargs, **outs)
            return
        result = self.func(*self.args, **self.kwargs)
        if self.targets:
            flat = tree_leaves(result)
            for index, target in self.targets:
                target.tensor.copy_(flat[index])


_out_overloads: dict[Any, tuple[Any, list[str]] | None] = {}


def _out_overload(func: Any, fresh: int) -> tuple[Any, list[str]] | None:
    """`func`'s out= overload and its out argument names, when it takes exactly `func`'s arguments plus
    one out tensor per returned tensor (and every return is fresh). Not for random ops: the runtime
    gives some of them (native_dropout) kernels of their own that draw from the device's generator,
    and not their out= overloads."""
    if func not in _out_overloads:
        _out_overloads[func] = None
        schema = func._schema
        seeded = torch.Tag.nondeterministic_seeded in func.tags
        if not seeded and schema.returns and all(isinstance(r.type, torch.TensorType) for r in schema.returns):
            names = [a.name for a in schema.arguments]
            packet = func._overloadpacket
            for overload_name in packet.overloads():
                candidate = getattr(packet, overload_name)._schema
                outs = [a for a in candidate.arguments if a.kwarg_only and a.alias_info is not None
                        and a.alias_info.is_write]
                rest = [a.name for a in candidate.arguments if a not in outs]
                if rest == names and len(outs) == len(schema.returns) and not schema.is_mutable:
                    _out_overloads[func] = getattr(packet, overload_name), [a.name for a in outs]
                    break
    found = _out_overloads[func]
    return found if found is not None and len(found[1]) == fresh else None


class KernelNode:
    """A host kernel Inductor generated: called again with the same buffers."""

    __slots__ = ("kernel", "name", "args", "kwargs", "reads", "writes")

    def __init__(self, kernel: Callable[..., Any], name: str, args: list[Any], kwargs: dict, reads: list[Ref],
                 writes: list[Ref]) -> None:
        self.kernel, self.name, self.args, self.kwargs = kernel, name, args, kwargs
        self.reads, self.writes = reads, writes

    def bind(self) -> None:
        self.args = [_tensor_of(a) if isinstance(a, Ref) else a for a in self.args]

    def run(self) -> None:
        self.kernel(*self.args, **self.kwargs)


class ReplayNode:
    """Another graph's replay, issued while this one captured: a child graph."""

    __slots__ = ("program", "reads", "writes")

    def __init__(self, program: "Program") -> None:
        self.program, self.reads, self.writes = program, program.refs(), program.written()

    @property
    def name(self) -> str:
        return "graph replay"

    def bind(self) -> None:
        pass

    def run(self) -> None:
        self.program.run()


def _tensor_of(ref: Ref) -> torch.Tensor:
    return ref.tensor


class Program:
    """A finished capture: its nodes, ready to run again."""

    def __init__(self, device: torch.device, nodes: list[Any], externals: list[Ref]) -> None:
        self.device, self.nodes, self.externals = device, nodes, externals
        self.instantiated = False

    def refs(self) -> list[Ref]:
        return [r for node in self.nodes for r in node.reads]

    def written(self) -> list[Ref]:
        return [r for node in self.nodes for r in node.writes]

    def instantiate(self) -> None:
        if self.instantiated:
            return
        with _bypass():
            for node in self.nodes:
                for ref in (*node.reads, *node.writes):
                    ref.build()
                node.bind()
        self.instantiated = True

    def dead_inputs(self) -> list[Ref]:
        return [ref for ref in self.externals if not ref.alive()]

    def run(self) -> None:
        module = _module(self.device)
        previous = module._exchange_device(self.device.index)
        try:
            with _bypass():
                for node in self.nodes:
                    node.run()
        finally:
            module._maybe_exchange_device(previous)


class _bypass:
    """Replay: transient results are not graph allocations, and its ops are not recorded again."""

    def __enter__(self) -> None:
        _local.replaying = getattr(_local, "replaying", 0) + 1
        runtime.extension().graph_bypass(True)

    def __exit__(self, *exc: object) -> None:
        runtime.extension().graph_bypass(False)
        _local.replaying -= 1


class Recording:
    """The work one capture records, and what it must undo when it ends."""

    def __init__(self, capture_id: int, device: torch.device, pool: tuple[int, int], trace_inputs: bool) -> None:
        self.capture_id, self.device, self.pool, self.trace_inputs = capture_id, device, pool, trace_inputs
        self.nodes: list[Any] = []
        self.pools_read: set[tuple[int, int]] = set()  # other graphs' pools it reads from, retained
        self._refs: dict[tuple, Ref] = {}
        # Blocks of the capture's pool that were allocated when it began: the rest held no data then.
        self._live_at_start = set(runtime.extension().graph_checkpoint(pool)[1])
        self._saved: dict[int, tuple[Any, bytes]] = {}  # pointer -> (owner kept alive, bytes before the capture)
        self._generators: dict[int, tuple[torch.Generator, torch.Tensor]] = {}
        with _bypass():  # the capture has begun, and refuses reading the generator's state to the user
            self._rng_state = _module(device).get_rng_state(device.index)

    # ---- recording ---------------------------------------------------------------------------
    def op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        refused = refusal(func, args, kwargs)
        if refused is not None:
            runtime.extension().graph_refuse(self.capture_id, UNSUPPORTED, *refused)
        name = func._schema.name
        written = _written(func, args, kwargs)
        for t in written:
            self._save_tensor(t)
        for generator in tree_leaves((args, kwargs)):
            if isinstance(generator, torch.Generator) and id(generator) not in self._generators:
                with _bypass():  # a capture refuses reading a generator's state; the emulation's own may
                    self._generators[id(generator)] = (generator, generator.get_state())
        out = func(*args, **kwargs)
        outputs = tree_leaves(out)
        if func.is_view or name in _NOT_REPLAYED:
            return out
        read_storages = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                         if isinstance(t, torch.Tensor)}
        targets = []
        for index, t in enumerate(outputs):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in read_storages:
                targets.append((index, self.ref(t, output=True)))
        if not targets and not written:
            return out  # a view the schema does not declare, or a query: nothing to run again
        written_ids = {id(t) for t in written}
        refs = tree_map_only(torch.Tensor, lambda t: self.ref(t, output=id(t) in written_ids), (args, kwargs))
        reads = [r for r in tree_leaves(refs) if isinstance(r, Ref)]
        writes = [self.ref(t, output=True) for t in written] + [r for _, r in targets]
        self.nodes.append(OpNode(func, refs[0], refs[1], targets, reads, writes))
        return out

    def kernel(self, kernel: Callable[..., Any], name: str, writes: tuple[int, ...] | None, args: tuple,
               kwargs: dict) -> Any:
        written = [a for i, a in enumerate(args) if isinstance(a, torch.Tensor) and (writes is None or i in writes)]
        for t in written:
            self._save_tensor(t)
        with _bypass():  # one kernel: what it does inside (Triton's interpreter copies to host) is its own
            result = kernel(*args, **kwargs)
        recorded = [self.ref(a, output=True) if isinstance(a, torch.Tensor) else a for a in args]
        refs = [r for r in recorded if isinstance(r, Ref)]
        written_refs = [r for i, r in enumerate(recorded) if isinstance(r, Ref) and (writes is None or i in writes)]
        self.nodes.append(KernelNode(kernel, name, recorded, kwargs, refs, written_refs))
        return result

    def replay(self, program: Program) -> None:
        """Another graph replayed on this capturing stream: recorded as a child graph."""
        for ref in program.written():
            self._save(ref.ptr, ref.nbytes, program)
        program.run()
        self.nodes.append(ReplayNode(program))

    def ref(self, t: torch.Tensor, output: bool = False) -> Ref:
        if t.device.type == "cpu":  # a 0-dim CPU input is a kernel argument, passed by value
            return Ref.holding(t.clone() if t.dim() == 0 and not output else t)
        storage = t.untyped_storage()
        key = (storage.data_ptr(), t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.is_conj(), t.is_neg())
        found = self._refs.get(key)
        if found is not None:
            return found
        pool = runtime.extension().graph_pointer_pool(key[0]) if key[0] else None
        if pool is not None:
            pool = tuple(pool)
            if pool != self.pool and pool not in self.pools_read:  # keep the memory it reads reserved
                runtime.extension().graph_pool_retain(GRAPH_KEYS[self.device.type], self.device.index, pool)
                self.pools_read.add(pool)
            ref = Ref(t)
        else:
            from torch.multiprocessing.reductions import StorageWeakRef

            origin = _user_stack() if self.trace_inputs else None
            ref = Ref(t, StorageWeakRef(storage), origin)
        self._refs[key] = ref
        return ref

    def _save_tensor(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        self._save(storage.data_ptr(), storage.nbytes(), storage)

    def _save(self, ptr: int, nbytes: int, owner: Any) -> None:
        """Keep the bytes at `ptr` from before this capture's first write there. Blocks of the capture's
        pool that were free when it began held no data (csrc/graphs.cpp keeps, when one that held data
        is freed during the capture, what it held)."""
        if not ptr or ptr in self._saved:
            return
        if ptr not in self._live_at_start and runtime.extension().graph_pointer_pool(ptr) == self.pool:
            return
        self._saved[ptr] = (owner, ctypes.string_at(ptr, nbytes))

    # ---- the end -----------------------------------------------------------------------------
    def finish(self) -> Program:
        """Put back what the capture changed outside its own memory; the recorded program."""
        for ptr, (_, data) in reversed(self._saved.items()):
            ctypes.memmove(ptr, data, len(data))
        self._saved.clear()
        for generator, state in self._generators.values():
            generator.set_state(state)
        _module(self.device).set_rng_state(self._rng_state, self.device.index)
        externals = {id(r): r for node in self.nodes for r in node.reads if r.weak is not None}
        return Program(self.device, self.nodes, list(externals.values()))


_INTERNAL = (str(Path(torch.__file__).parent), str(Path(__file__).parent.parent))  # torch's and torchplug's code


def _user_stack() -> str:
    """Where the user's code is in the stack: check_input_liveness reports it for inputs that die."""
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_INTERNAL)]
    return "".join(traceback.format_list(frames))


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors `func` writes: its mutable arguments (and batch norm's running statistics, which its
    schema does not declare)."""
    written = []
    schema = func._schema
    for i, argument in enumerate(schema.arguments):
        alias = argument.alias_info
        mutated = alias is not None and alias.is_write
        if not mutated and not (schema.name == "aten::native_batch_norm" and argument.name in ("running_mean", "running_var")):
            continue
        value = args[i] if i < len(args) and not argument.kwarg_only else kwargs.get(argument.name)
        written.extend(t for t in tree_leaves(value) if isinstance(t, torch.Tensor))
    return written


def _module(device: torch.device) -> Any:
    """torch.cuda or torch.xpu, whose functions are the emulated device module's (hooks.install put them there)."""
    return getattr(torch, device.type)


# ---- finding the capture an op belongs to ----------------------------------------------------
def _device_of(args: tuple, kwargs: dict) -> torch.device | None:
    for leaf in tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor):
            if leaf.device.type in GRAPH_KEYS:
                return leaf.device
        elif isinstance(leaf, torch.device) and leaf.type in GRAPH_KEYS:
            return leaf if leaf.index is not None else torch.device(leaf.type, _module(leaf).current_device())
    return None


def recording_for(device: torch.device) -> Recording | None:
    """The recording of the capture the current stream of `device` belongs to, if any."""
    ext = runtime.extension()
    capture, error = ext.graph_current_capture(GRAPH_KEYS[device.type], device.index)
    if not capture:
        return None
    if error:
        ext.graph_refuse(capture, INVALIDATED, f"work was issued on a capturing stream after {error} invalidated the "
                         "capture", "End the capture (capture_end) and capture again.")
    return _recordings.get(capture)


class _Recorder(TorchDispatchMode):
    """Sends each op on a capturing stream to its recording; the rest run as usual."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # torch.compile'd code called during a capture runs compiled, as on a GPU: Dynamo does not fall
        # back to eager for this mode, which sees the compiled code's ATen calls and, through
        # launch_host_kernel, its kernels (compilation itself runs with the mode off).
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(_local, "replaying", 0):
            return func(*args, **kwargs)
        if any(getattr(t, "__torch_dispatch__", _PLAIN) is not _PLAIN for t in types):
            return NotImplemented  # a tensor subclass unwraps itself; its inner ops come back here
        device = _device_of(args, kwargs)
        recording = recording_for(device) if device is not None else None
        if recording is None:
            return func(*args, **kwargs)
        return recording.op(func, args, kwargs)


def start(recording: Recording) -> None:
    """Begin recording on this thread (the one that began the capture)."""
    _recordings[recording.capture_id] = recording
    depth = getattr(_local, "depth", 0)
    if depth == 0:
        _local.recorder = _Recorder()
        _local.recorder.__enter__()
    _local.depth = depth + 1


def stop(recording: Recording) -> None:
    _recordings.pop(recording.capture_id, None)
    _local.depth -= 1
    if _local.depth == 0:
        recorder, _local.recorder = _local.recorder, None
        recorder.__exit__(None, None, None)


def launch_host_kernel(kernel: Callable[..., Any], name: str, writes: tuple[int, ...] | None, *args: Any,
                       **kwargs: Any) -> Any:
    """How Inductor's generated code for an emulated device launches a kernel (codegen/wrapper.py): one
    launched on a capturing stream is recorded. `writes`: which arguments it writes (None: unknown)."""
    if _recordings and not getattr(_local, "replaying", 0):
        device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.device.type in GRAPH_KEYS), None)
        recording = recording_for(device) if device is not None else None
        if recording is not None:
            return recording.kernel(kernel, name, writes, args, kwargs)
    return kernel(*args, **kwargs)
