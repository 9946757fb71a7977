// The Python face of the binding: bind a runtime table (its address, from ctypes) to PrivateUse1 and
// answer torch.<name>'s questions (torchplug/binding/device_module.py).
#include "binding.h"

#include <ATen/core/Generator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // torch.dtype <-> c10::ScalarType

#include <cstdint>
#include <mutex>

namespace py = pybind11;
using namespace torchplug::binding;

namespace {

void bind_address(uintptr_t address, const std::string& plugin) {
  static bool registered = false;
  bind(reinterpret_cast<const torchplug_device_runtime*>(address), plugin);
  if (!registered) {
    c10::SetAllocator(kType, device_allocator());
    register_guard();
    register_hooks();
    register_kernels();
    register_autocast();
    registered = true;
  }
}

py::dict properties(int32_t device) {
  torchplug_device_properties found{};
  check(runtime().get_device_properties(device, &found), "get_device_properties");
  found.name[sizeof(found.name) - 1] = '\0';
  py::dict result;
  result["name"] = std::string(found.name);
  result["total_memory"] = found.total_memory;
  result["multi_processor_count"] = found.multi_processor_count;
  result["major"] = found.major;
  result["minor"] = found.minor;
  result["warp_size"] = found.warp_size;
  return result;
}

// Calls `kernel(*args, **kwargs)` inside the runtime's launch_host window on `device` (torch.compile's host
// kernels: binding/launcher.py) and returns its result, or raises its exception.
//
// The GIL stays held throughout. Inside a window only this thread can need it, and every other holder of the
// runtime's lock (a malloc, free or copy; an op's host kernel, which torch's bindings launch without the GIL)
// finishes without it; were it released while waiting for the window, a thread that frees a tensor under the
// GIL could hold it while this one, in the window, waits for it. Python's garbage collector is off inside the
// window: a collection could free device memory there, and the runtime's lock is not re-entrant. (So `kernel`
// must not release the GIL itself; Inductor's C++ kernels run without running Python.)
py::object launch_python(int32_t device, const py::object& kernel, const py::tuple& args, const py::object& kwargs) {
  struct Call {
    PyObject* kernel;
    PyObject* args;
    PyObject* kwargs;
    PyObject* result;  // NULL with the Python error set when the kernel raised
  } call{kernel.ptr(), args.ptr(), kwargs.is_none() ? nullptr : kwargs.ptr(), nullptr};
  const torchplug_host_kernel run = [](void* arguments) {
    auto* c = static_cast<Call*>(arguments);
    c->result = PyObject_Call(c->kernel, c->args, c->kwargs);  // a C call: nothing crosses the runtime's frame
  };
  const int collecting = PyGC_Disable();
  try {
    launch_host(device, run, &call, "a torch.compile host kernel");
  } catch (...) {
    if (collecting) PyGC_Enable();
    throw;
  }
  if (collecting) PyGC_Enable();
  if (call.result == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(call.result);
}

// `use(generator)` on the device's default generator, holding its lock as torch's own callers do.
template <typename Use>
auto with_generator(int32_t device, Use use) {
  at::Generator& generator = default_generator(device);
  const std::lock_guard<std::mutex> lock(generator.mutex());
  return use(generator);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bind", &bind_address, "bind the runtime table at `address` to PrivateUse1");
  m.def("declare_dtypes", &declare_dtypes, "refuse device memory of any dtype but these");
  m.def("device_count", &device_count);
  m.def("current_device", &current_device);
  m.def("set_device", &set_device);
  m.def("synchronize", [](int32_t device) { check(runtime().synchronize(device), "synchronize"); });
  m.def("properties", &properties);
  m.def("register_launch_kernel", &register_launch_kernel, "run `op`'s CPU kernel inside the runtime's launch_host");
  m.def("launch_host", &launch_python, "kernel(*args, **kwargs) inside the runtime's launch_host window on `device`");
  m.def("host_launches", [](int32_t device) { return stats(device).launches.load(); });
  // Random numbers: each device's default generator (hooks.cpp).
  m.def("manual_seed", [](int32_t device, uint64_t seed) {
    with_generator(device, [seed](at::Generator& generator) { generator.set_current_seed(seed); });
  });
  m.def("seed", [](int32_t device) {
    return with_generator(device, [](at::Generator& generator) { return generator.seed(); });
  });
  m.def("initial_seed", [](int32_t device) { return default_generator(device).current_seed(); });
  m.def("get_rng_state", [](int32_t device) {
    return with_generator(device, [](at::Generator& generator) { return generator.get_state(); });
  });
  m.def("set_rng_state", [](int32_t device, const at::Tensor& state) {
    with_generator(device, [&state](at::Generator& generator) { generator.set_state(state); });
  });
  m.def("memory_allocated", [](int32_t device) { return stats(device).allocated.load(); });
  m.def("max_memory_allocated", [](int32_t device) { return stats(device).peak.load(); });
  m.def("reset_peak", [](int32_t device) { stats(device).peak.store(stats(device).allocated.load()); });
}
