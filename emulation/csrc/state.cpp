// Per-device-type state: which types are emulated, how many devices each has, which dtypes they
// accept, and the checks every entry point shares (device index, dtype).
#include "emulation.h"

#include <c10/util/Exception.h>

namespace torchplug::emulation {

namespace {
std::array<TypeState, kNumDeviceTypes> g_states;
}

TypeState& state(c10::DeviceType type) {
  return g_states[static_cast<size_t>(type)];
}

bool is_emulated(c10::DeviceType type) {
  auto index = static_cast<size_t>(type);
  return index < g_states.size() && g_states[index].enabled.load(std::memory_order_acquire);
}

void check_index(c10::DeviceType type, int64_t index) {
  const TypeState& st = state(type);
  // Same wording as CUDA's "invalid device ordinal", plus the count and the way to change it.
  TORCH_CHECK(
      index >= 0 && index < st.count,
      "invalid device ordinal: ", c10::DeviceTypeName(type, true), ":", index,
      " is out of range; torchplug's emulated ", c10::DeviceTypeName(type, true), " runtime has ",
      st.count, " device(s) (indices 0..", st.count - 1,
      "). Set TORCHPLUG_EMULATE_DEVICES to emulate more.");
}

c10::Device resolve(c10::Device device) {
  if (!device.has_index()) {
    return c10::Device(device.type(), current_device(device.type()));
  }
  check_index(device.type(), device.index());
  return device;
}

std::string dtype_name(c10::ScalarType dtype) {
  return "torch." + std::string(c10::getDtypeNames(dtype).first);
}

bool dtype_allowed(c10::DeviceType type, c10::ScalarType dtype) {
  return (state(type).dtype_mask >> static_cast<int>(dtype)) & 1ull;
}

void check_dtype(c10::DeviceType type, c10::ScalarType dtype, const std::string& where) {
  if (dtype_allowed(type, dtype)) {
    return;
  }
  const TypeState& st = state(type);
  const bool is_complex = c10::isComplexType(dtype);
  // Real MPS raises TypeError here too ("MPS framework doesn't support float64").
  TORCH_CHECK_TYPE(
      false, where, ": the emulated '", c10::DeviceTypeName(type, true), "' device (torchplug backend '",
      st.backend, "') does not support ", dtype_name(dtype), ", because the real device does not. Fix: use ",
      is_complex ? "torch.complex64" : "torch.float32", " (e.g. tensor.to(",
      is_complex ? "torch.complex64" : "torch.float32", ") before moving it to the device), or run this op on the CPU.");
}

}  // namespace torchplug::emulation
