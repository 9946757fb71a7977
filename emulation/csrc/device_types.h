// The device types the emulated runtime can serve, written once: each with its dispatch key, its
// autograd key and the key's name as the Python side passes it ("CUDA", ...). Every C++ switch over
// emulated types reads this table.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/DispatchKey.h>
#include <c10/util/Exception.h>

#include <array>
#include <string>

namespace torchplug::emulation {

struct EmulatedType {
  c10::DeviceType type;
  c10::DispatchKey key;
  c10::DispatchKey autograd_key;
  const char* key_name;
  const char* runtime_name;  // the name of its host runtime table (host_runtime.cpp)
};

inline constexpr std::array<EmulatedType, 4> kEmulatedTypes{{
    {c10::DeviceType::CUDA, c10::DispatchKey::CUDA, c10::DispatchKey::AutogradCUDA, "CUDA", "torchplug emulation (host memory) as cuda"},
    {c10::DeviceType::XPU, c10::DispatchKey::XPU, c10::DispatchKey::AutogradXPU, "XPU", "torchplug emulation (host memory) as xpu"},
    {c10::DeviceType::MPS, c10::DispatchKey::MPS, c10::DispatchKey::AutogradMPS, "MPS", "torchplug emulation (host memory) as mps"},
    {c10::DeviceType::PrivateUse1, c10::DispatchKey::PrivateUse1, c10::DispatchKey::AutogradPrivateUse1, "PrivateUse1", "torchplug emulation (host memory) as PrivateUse1"},
}};

// The type's position in kEmulatedTypes; raises for a type the runtime cannot emulate.
inline int emulated_slot(c10::DeviceType type) {
  for (size_t i = 0; i < kEmulatedTypes.size(); ++i) {
    if (kEmulatedTypes[i].type == type) return static_cast<int>(i);
  }
  TORCH_CHECK(false, "torchplug cannot emulate device type ", type);
}

inline const EmulatedType& emulated_type(c10::DeviceType type) { return kEmulatedTypes[emulated_slot(type)]; }

inline const EmulatedType& emulated_type(const std::string& key_name) {
  for (const EmulatedType& entry : kEmulatedTypes) {
    if (key_name == entry.key_name) return entry;
  }
  TORCH_CHECK(false, "torchplug cannot emulate dispatch key '", key_name, "' (CUDA, XPU, MPS or PrivateUse1)");
}

}  // namespace torchplug::emulation
