// The dtypes the plugin declares (BackendSpec.dtypes): device memory of any other dtype is refused
// when it would be allocated, with the TypeError a real device gives (MPS for float64), naming the
// device, the dtype and what the plugin declares.
#include "binding.h"

#include <c10/util/Exception.h>
#include <array>
#include <bitset>
#include <map>
#include <string>
#include <vector>

namespace torchplug::binding {
namespace {

constexpr size_t kDtypes = static_cast<size_t>(c10::ScalarType::NumOptions);
std::bitset<kDtypes> declared;
std::array<std::string, kDtypes> names;  // torch.float32, ... (from Python: C++ knows c10's names only)
std::string device_name;
std::string declared_names;

std::string python_name(c10::ScalarType dtype) {
  const std::string& name = names[static_cast<size_t>(dtype)];
  return name.empty() ? c10::toString(dtype) : name;
}

}  // namespace

void declare_dtypes(const std::vector<c10::ScalarType>& dtypes, const std::map<c10::ScalarType, std::string>& all_names,
                    const std::string& device) {
  for (const auto& [dtype, name] : all_names) names[static_cast<size_t>(dtype)] = name;
  declared.reset();
  declared_names.clear();
  for (const c10::ScalarType dtype : dtypes) {
    declared.set(static_cast<size_t>(dtype));
    declared_names += (declared_names.empty() ? "" : ", ") + python_name(dtype);
  }
  device_name = device;
}

void check_dtype(c10::ScalarType dtype) {
  if (declared.none() || declared.test(static_cast<size_t>(dtype))) return;  // none declared: not bound yet
  TORCH_CHECK_TYPE(false, "torchplug: the '", device_name, "' device does not support ", python_name(dtype),
                   " (its plugin declares ", declared_names, "). Fix: convert the tensor to a declared dtype before "
                   "moving it to the device, or compute this on the CPU.");
}

}  // namespace torchplug::binding
