"""torch.cuda.CUDAGraph (and torch.xpu.XPUGraph) for emulated devices, with a GPU's semantics.

install() puts the emulated graph class where torch's Python code looks for it: torch.cuda.CUDAGraph
and torch.cuda.graphs.CUDAGraph, with the private bindings torch.cuda.graphs imported
(_graph_pool_handle, _cuda_isCurrentStreamCapturing). torch's own torch.cuda.graph context manager,
graph_pool_handle(), is_current_stream_capturing() and make_graphed_callables() then work unchanged.
On a CUDA build of torch this replaces the class bound to the CUDA runtime, which has no GPU to use
when cuda is emulated; nothing is touched unless cuda (or xpu) is emulated. graph_capture.py records
and replays the work; csrc/graphs.cpp keeps the capture state, the private pools and the refusals.
"""

import threading
import warnings
from typing import Any

import torch

from ..entrypoints.torch_devices import torch_device_type
from . import runtime
from .graph_capture import GRAPH_KEYS, Program, Recording, start, stop

_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


def graph_class(module: Any) -> type:
    """The graph class (CUDAGraph or XPUGraph) for the emulated device module `module`."""
    device_type, key = module.type, GRAPH_KEYS[module.type]
    upper = device_type.upper()
    name = f"{upper}Graph"

    class EmulatedGraph:
        _debug = False  # enable_debug_mode(): like torch's, for every graph of the process

        def __init__(self, keep_graph: bool = False) -> None:
            self._keep_graph = keep_graph
            self._recording: Recording | None = None
            self._program: Program | None = None
            self._thread: int | None = None
            self._stream = 0
            self._pools: list[tuple[int, int]] = []  # pools this graph holds: its own first
            self._trace_inputs = False

        # ---- capture ---------------------------------------------------------------------------
        def capture_begin(self, pool: tuple[int, int] | None = None, capture_error_mode: str = "global",
                          check_input_liveness: bool = False) -> None:
            """Begin capturing the work issued on the current stream."""
            if self._program is not None or self._recording is not None:
                raise RuntimeError(f"This {name} instance already owns a captured graph. "
                                   "To capture a new graph, create a new instance.")
            mode = _MODES.get(capture_error_mode)
            if mode is None:
                raise RuntimeError("Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, "
                                   f"got {capture_error_mode}")
            ext = runtime.extension()
            index = module.current_device()
            stream = ext.current_stream(key, index)
            if stream == 0:
                raise RuntimeError(f"{upper} graphs must be captured on a non-default stream. "
                                   "(However, after capture, it's ok to replay them on the default stream.)")
            pool_id = _pool_id(pool) or tuple(ext.graph_new_pool_id())
            capture = ext.graph_capture_begin(key, index, stream, mode, pool_id)
            self._pools = [pool_id]
            self._stream, self._thread = stream, threading.get_ident()
            self._trace_inputs = check_input_liveness
            self._recording = Recording(capture, torch.device(device_type, index), pool_id, check_input_liveness)
            start(self._recording)

        def capture_end(self) -> None:
            """End the capture on the stream it began on; after it, replay() may be called."""
            recording = self._recording
            if recording is None:
                raise RuntimeError("capture_end() called before capture_begin().")
            ext = runtime.extension()
            if ext.current_stream(key, recording.device.index) != self._stream:
                raise RuntimeError("Capture must end on the same stream it began on.")
            if threading.get_ident() != self._thread:
                raise RuntimeError(f"torchplug's emulated {device_type}: capture_end() must run on the thread that "
                                   "called capture_begin(), which records the capture.")
            self._recording = None
            stop(recording)
            code, error = ext.graph_capture_end(recording.capture_id)
            program = recording.finish()
            self._pools.extend(sorted(recording.pools_read))  # the recording retained them; reset() gives them back
            if error:
                raise _accelerator_error(error, code)
            if not program.nodes:
                warnings.warn(f"The {upper} Graph is empty. This usually means that the graph was attempted "
                              "to be captured on wrong device or stream.", stacklevel=2)
            self._program = program
            if not (self._keep_graph or EmulatedGraph._debug):
                self.instantiate()

        def instantiate(self) -> None:
            """Prepare the recorded work for replay (capture_end does it unless keep_graph=True)."""
            if self._program is None:
                raise RuntimeError("capture_end() must have been called before calling instantiate")
            self._program.instantiate()

        def register_generator_state(self, generator: Any) -> None:
            """Accepted for torch's API: every generator an op uses advances on each replay anyway."""

        # ---- replay ----------------------------------------------------------------------------
        def replay(self) -> None:
            """Run the captured work again, on the current contents of the memory it used."""
            program = self._program
            if program is None:
                raise RuntimeError(f"Called {name}::replay without a preceding successful capture.")
            program.instantiate()
            dead = program.dead_inputs()
            if dead:
                raise RuntimeError(_dead_inputs_message(dead, device_type, self._trace_inputs))
            from .graph_capture import recording_for

            outer = recording_for(program.device)
            if outer is not None:
                outer.replay(program)
            else:
                program.run()

        def reset(self) -> None:
            """Delete the graph this instance holds (and give back its memory pools)."""
            recording, self._recording = self._recording, None
            if recording is not None:  # reset during a capture abandons it
                stop(recording)
                runtime.extension().graph_capture_end(recording.capture_id)
                recording.finish()
                self._pools.extend(recording.pools_read)
            self._program = None
            pools, self._pools = self._pools, []
            if pools and runtime.is_configured(device_type):
                for pool in pools:
                    runtime.extension().graph_pool_release(pool)

        def __del__(self) -> None:
            try:
                self.reset()
            except Exception:  # never raise during garbage collection
                pass

        def pool(self) -> tuple[int, int]:
            """An opaque token for this graph's memory pool, to share it with another capture."""
            if self._program is None:
                raise RuntimeError(f"Called {name}::pool() without a preceding successful capture.")
            return self._pools[0]

        # ---- debugging -------------------------------------------------------------------------
        def enable_debug_mode(self) -> None:
            """Keep every graph's recorded work inspectable after capture_end (debug_dump)."""
            EmulatedGraph._debug = True

        def debug_dump(self, debug_path: str) -> None:
            """Write the recorded work to `debug_path` as a Graphviz DOT graph."""
            if not (EmulatedGraph._debug or self._keep_graph):
                warnings.warn(f"{upper} Graphs debug not enabled, set with [graph].enable_debug_mode()", stacklevel=2)
                return
            if self._program is not None:
                from .graph_debug import dot

                with open(debug_path, "w") as file:
                    file.write(dot(self._program, name))

        def get_graph_data(self) -> dict:
            """The recorded work's nodes and dependencies, in the structure torch returns for a CUDA graph."""
            if not self._keep_graph:
                raise RuntimeError("get_graph_data() needs a graph captured with keep_graph=True")
            if self._program is None or not self._program.instantiated:
                raise RuntimeError("get_graph_data() needs an instantiated graph: call instantiate() first")
            from .graph_debug import graph_data

            return graph_data(self._program, id(self))

        def _raw(self, what: str) -> int:
            raise RuntimeError(f"{what}: torchplug's emulated {device_type} device records ATen ops and host "
                               f"kernels, not a {device_type} runtime graph, so there is no handle to return")

    EmulatedGraph.__name__ = EmulatedGraph.__qualname__ = name
    EmulatedGraph.__doc__ = (f"Wrapper around a {upper} graph on torchplug's emulated {device_type} device: capture "
                             "records the device work, replay runs it again on the same memory (docs/emulation.md, "
                             "'CUDA graphs').")
    EmulatedGraph.__module__ = f"torch.{device_type}.graphs"
    for method in torch_device_type(device_type).raw_graph_methods:  # raw_cuda_graph(), ...: no runtime handle
        setattr(EmulatedGraph, method, lambda self, what=f"{method}()": self._raw(what))
    return EmulatedGraph


def _pool_id(pool: Any) -> tuple[int, int] | None:
    if pool is None:
        return None
    pool = getattr(pool, "id", pool)  # a torch.cuda.MemPool names its pool by .id
    first, second = (int(v) for v in pool)
    if first and second:
        raise RuntimeError(f"a graph pool handle sets one of its two values, got {pool!r}: pass what "
                           "graph_pool_handle() or another graph's pool() returned")
    return None if first == second == 0 else (first, second)


def _accelerator_error(message: str, code: int) -> torch.AcceleratorError:
    error = torch.AcceleratorError(message)
    error.error_code = code
    return error


def _dead_inputs_message(dead: list[Any], device_type: str, traced: bool) -> str:
    """torch's check_input_liveness wording, and why the emulation always checks."""
    lines = [f"{device_type.upper()} graph replay detected {len(dead)} dead tensor(s)."]
    for i, ref in enumerate(dead[:5], 1):
        lines.append(f"Dead tensor #{i} (data_ptr={ref.ptr:#x}, shape {list(ref.size)}, {ref.dtype}):")
        if ref.origin:
            lines.append("  First used in the capture (Python):\n" + "\n".join("    " + line for line in ref.origin.splitlines()))
    if len(dead) > 5:
        lines.append(f"  ... and {len(dead) - 5} more")
    lines.append(
        f"torchplug's emulated {device_type} device refuses to replay: the graph reads memory that was freed (or "
        "that its storage gave up) after the capture; on a GPU the replay would read freed memory and give "
        "undefined results. Keep the graph's inputs alive while it is replayed"
        + ("." if traced else ", and capture with check_input_liveness=True to see where they were created."))
    return "\n".join(lines)


def install(module: Any) -> None:
    """Put the emulated graph API on torch.<device type> (cuda or xpu; a torch without it is left alone)."""
    device_type = module.type
    package = getattr(torch, device_type)
    graphs = getattr(package, "graphs", None)
    if device_type not in GRAPH_KEYS or graphs is None:
        return
    key = GRAPH_KEYS[device_type]
    cls = graph_class(module)
    name = cls.__name__

    def graph_pool_handle() -> tuple[int, int]:
        return tuple(runtime.extension().graph_pool_handle())

    def is_current_stream_capturing() -> bool:
        if not runtime.is_configured(device_type):
            return False  # as torch: no context yet, so nothing can capture
        index = module.current_device()
        return bool(runtime.extension().graph_current_capture(key, index)[0])

    facts = torch_device_type(device_type)
    replacements = {
        name: cls,
        facts.graph_pool_handle: graph_pool_handle,
        f"_{device_type}_isCurrentStreamCapturing": is_current_stream_capturing,
    }
    for attr, value in replacements.items():
        if hasattr(graphs, attr):
            setattr(graphs, attr, value)
        if attr != name:
            setattr(torch._C, attr, value)  # other torch modules call the bindings by these names
    setattr(package, name, cls)
    if facts.cuda_api:
        from .graph_trees import install as install_inductor_bindings

        install_inductor_bindings()
    if not hasattr(torch._C, "_host_emptyCache"):  # torch.cuda.graph calls it; host memory has no cache
        torch._C._host_emptyCache = lambda: None
