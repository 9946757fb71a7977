// Python bindings of the emulated runtime (pybind11 only: torch/extension.h would triple the
// build time). Device types are named by their dispatch key: "CUDA", "XPU", "MPS", "PrivateUse1".
#include "device_types.h"
#include "emulation.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>

#include <mutex>

namespace py = pybind11;

namespace torchplug::emulation {

namespace {

c10::DeviceType parse_type(const std::string& key) { return emulated_type(key).type; }

c10::Device device_of(const std::string& key, int64_t index) {
  c10::DeviceType type = parse_type(key);
  TORCH_CHECK(is_emulated(type), "the ", key, " device type is not emulated in this process");
  check_index(type, index);
  return c10::Device(type, static_cast<c10::DeviceIndex>(index));
}

std::mutex g_configure_mutex;

// The Python runtime's configure-everything entry point, set at autoload when a cached build is
// loaded early (emulation/hooks.py). Leaked on purpose: it must outlive the interpreter's teardown.
py::object* g_configure_callback = nullptr;

// Switch a device type on. Idempotent for the same settings; the settings cannot change later
// because tensors and guards already hold on to them.
// `refused` names the dtypes (e.g. "float64") the backend does not declare; the device rejects them.
// `adopt_native` (a CUDA build): the build's own kernels for the type take the host path too.
void configure(const std::string& key, int64_t count, const std::vector<int64_t>& capacities,
               const std::vector<std::string>& refused, const std::string& backend, bool adopt_native) {
  std::lock_guard<std::mutex> lock(g_configure_mutex);
  c10::DeviceType type = parse_type(key);
  TypeState& st = state(type);
  if (st.enabled.load()) {
    TORCH_CHECK(st.count == count && st.backend == backend, "the emulated ", key, " device type is already configured for backend '",
                st.backend, "' with ", st.count, " device(s)");
    return;
  }
  TORCH_CHECK(count >= 1 && count <= kMaxDevices, "TORCHPLUG_EMULATE_DEVICES must be between 1 and ", kMaxDevices, ", got ", count);
  TORCH_CHECK(static_cast<int64_t>(capacities.size()) == count, "one capacity per device expected");
  uint64_t dtype_mask = ~0ull;
  const auto& names = c10::getStringToDtypeMap();
  for (const std::string& name : refused) {
    auto found = names.find(name);
    TORCH_CHECK(found != names.end(), "unknown dtype name '", name, "'");
    dtype_mask &= ~(1ull << static_cast<int>(found->second));
  }
  st.count = static_cast<int>(count);
  st.dtype_mask = dtype_mask;
  st.backend = backend;
  for (int64_t i = 0; i < count; ++i) {
    st.stats[i].capacity.store(capacities[i]);
  }
  install_host_allocator();
  if (type == c10::DeviceType::CUDA) {
    swap_cuda_hooks();  // before the type is enabled: nothing may see it half set up
  }
  create_generators(type, st.count);
  device_allocator(type);
  register_guard(type);
  st.enabled.store(true, std::memory_order_release);
  QuietOverrides quiet;  // the per-op kernels below replace the build's, or the adopted ones
  register_fallback(type);
  if (adopt_native) {
    adopt_native_kernels(type);
  }
  register_composite_overrides(type);
  register_sparse_refusals(type);
}

// MPS tensors reach torch's device guards before any lazy-init hook runs (x.to("mps") asks the
// guard for the current device), so the guard is registered at autoload, ahead of `configure`.
void register_guard_early(const std::string& key, int64_t count) {
  std::lock_guard<std::mutex> lock(g_configure_mutex);
  c10::DeviceType type = parse_type(key);
  TypeState& st = state(type);
  if (st.enabled.load() || st.count > 0) {
    return;
  }
  TORCH_CHECK(count >= 1 && count <= kMaxDevices, "TORCHPLUG_EMULATE_DEVICES must be between 1 and ", kMaxDevices);
  st.count = static_cast<int>(count);
  register_guard(type);
}

// torch.cuda.memory_stats()'s nested form: {"allocated_bytes": {"all": {"current": ...}}, ...}.
py::dict memory_stats(const std::string& key, int64_t index) {
  const DeviceStats& s = state(device_of(key, index).type()).stats[index];
  const char* pools[kNumPools] = {"all", "small_pool", "large_pool"};
  auto nested = [&](const std::array<Stat, kNumPools>& stats) {
    py::dict by_pool;
    for (int pool = 0; pool < kNumPools; ++pool) {
      const Stat& stat = stats[pool];
      py::dict values;
      values["current"] = stat.current.load();
      values["peak"] = stat.peak.load();
      values["allocated"] = stat.allocated.load();
      values["freed"] = stat.freed.load();
      by_pool[pools[pool]] = values;
    }
    return by_pool;
  };
  py::dict d;
  d["allocated_bytes"] = nested(s.bytes);
  d["allocation"] = nested(s.blocks);
  d["num_ooms"] = s.num_ooms.load();
  d["capacity"] = s.capacity.load();
  return d;
}

}  // namespace

void configure_on_first_use(c10::DeviceType type) {
  if (is_emulated(type) || g_configure_callback == nullptr) {
    return;
  }
  py::gil_scoped_acquire gil;
  try {
    (*g_configure_callback)();
  } catch (py::error_already_set& err) {
    TORCH_CHECK(false, "torchplug could not set up the emulated ", type, " device: ", err.what());
  }
}

}  // namespace torchplug::emulation

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace torchplug::emulation;
  m.doc() = "torchplug's emulated device runtime";
  // c10 errors reach Python as torch's own bindings raise them: without the C++ backtrace.
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) {
        std::rethrow_exception(error);
      }
    } catch (const c10::IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
    } catch (const c10::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
    } catch (const c10::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
  m.attr("MAX_DEVICES") = kMaxDevices;
  m.def("configure", &configure, py::arg("key"), py::arg("count"), py::arg("capacities"), py::arg("refused"),
        py::arg("backend"), py::arg("adopt_native") = false);
  // The emulated model's identity, which the host runtime's get_device_properties reports.
  m.def("set_device_properties", [](const std::string& key, const std::string& name, int32_t multi_processor_count,
                                    int32_t major, int32_t minor, int32_t warp_size) {
    state(parse_type(key)).properties = DeviceProperties{name, multi_processor_count, major, minor, warp_size};
  });
  // The address of the type's host runtime table (torchplug/device_runtime.h), for the Python mirror.
  m.def("runtime_table", [](const std::string& key) {
    return reinterpret_cast<uintptr_t>(&host_runtime(parse_type(key)));
  });
  m.def("defined_ops_mark", &defined_ops_mark);
  m.def("adopt_native_kernels_since", [](const std::string& key, int64_t mark) {
    return adopt_native_kernels_since(parse_type(key), mark);
  });
  m.def("memory_stats", &memory_stats);
  m.def("record_dispatches", &record_dispatches);
  m.def("take_dispatched", &take_dispatched);
  m.def("register_guard_early", &register_guard_early);
  m.def("set_configure_callback", [](py::function callback) {
    if (g_configure_callback == nullptr) {
      g_configure_callback = new py::object(std::move(callback));
    }
  });
  // See hooks.cpp.
  m.def("register_privateuse1_hooks", &register_privateuse1_hooks);
  m.def("set_accelerator", [](const std::string& key) { set_accelerator(parse_type(key)); });
  m.def("swap_cuda_hooks", &swap_cuda_hooks);
  m.def("mute_cuda_hooks", &mute_cuda_hooks);
  m.def("cuda_hooks_state", &cuda_hooks_state);
  // `storage` is an UntypedStorage's _cdata (its StorageImpl*); the caller keeps the storage alive.
  m.def("resize_storage", [](uintptr_t storage, size_t nbytes) {
    auto* impl = reinterpret_cast<c10::StorageImpl*>(storage);
    TORCH_CHECK(is_emulated(impl->device().type()), "resize_storage: ", impl->device(), " is not an emulated device");
    resize_storage_bytes(impl, nbytes);
  });
  m.def("memory_allocated", [](const std::string& key, int64_t index) {
    return state(device_of(key, index).type()).stats[index].bytes[kAllPools].current.load();
  });
  m.def("reset_peak", [](const std::string& key, int64_t index) { reset_peak(device_of(key, index)); });
  m.def("reset_accumulated", [](const std::string& key, int64_t index) { reset_accumulated(device_of(key, index)); });
  m.def("device_count", [](const std::string& key) {
    c10::DeviceType type = parse_type(key);
    return is_emulated(type) ? state(type).count : 0;
  });
  m.def("current_device", [](const std::string& key) { return static_cast<int64_t>(current_device(parse_type(key))); });
  m.def("exchange_device", [](const std::string& key, int64_t index) {
    return static_cast<int64_t>(exchange_device(parse_type(key), static_cast<c10::DeviceIndex>(index)));
  });
  m.def("current_stream", [](const std::string& key, int64_t index) { return current_stream_id(device_of(key, index)); });
  m.def("set_stream", [](const std::string& key, int64_t index, int64_t stream_id) {
    set_current_stream(device_of(key, index), stream_id);
  });
  // Python objects for the devices' default generators, made once (torch.cuda.default_generators).
  m.def("default_generators", [](const std::string& key) {
    const c10::DeviceType type = parse_type(key);
    TORCH_CHECK(is_emulated(type), "the ", key, " device type is not emulated in this process");
    py::list generators;
    for (int index = 0; index < state(type).count; ++index) {
      const at::Generator& generator = default_generator(c10::Device(type, static_cast<c10::DeviceIndex>(index)));
      generators.append(py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(generator)));
    }
    return generators;
  });
  m.def("manual_seed", [](const std::string& key, int64_t index, uint64_t value) { manual_seed(device_of(key, index), value); });
  m.def("initial_seed", [](const std::string& key, int64_t index) { return initial_seed(device_of(key, index)); });
  m.def("seed", [](const std::string& key, int64_t index) { return seed(device_of(key, index)); });
  m.def("get_rng_state", [](const std::string& key, int64_t index) { return py::bytes(get_rng_state(device_of(key, index))); });
  m.def("set_rng_state", [](const std::string& key, int64_t index, const std::string& bytes) {
    set_rng_state(device_of(key, index), bytes);
  });
  bind_graphs(m);  // graph capture and pools (graphs.cpp)
}
