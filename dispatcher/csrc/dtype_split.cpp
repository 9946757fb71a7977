// The dtype split: one boxed kernel per (op, dispatch key) that sends each call to the registered
// backend kernel for the call's dtype, or else to the kernel torch had there before (native).
// All decisions are table lookups made at registration; a call never enters Python to route.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Dtype.h>
#include <torch/library.h>

#include "dispatch.h"

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

namespace {

using c10::DispatchKeySet;
using c10::OperatorHandle;
using c10::SafeKernelFunction;
constexpr size_t kNumDtypes = static_cast<size_t>(c10::ScalarType::NumOptions);

// The dtype that selects a kernel: that of the first defined tensor argument.
std::optional<c10::ScalarType> call_dtype(const OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  for (auto it = stack.end() - n; it != stack.end(); ++it) {
    if (it->isTensor() && it->toTensor().defined()) return it->toTensor().scalar_type();
    if (it->isTensorList() && !it->toTensorList().empty()) return it->toTensorList().get(0).scalar_type();
  }
  return std::nullopt;
}

class DtypeSplit final : public c10::OperatorKernel {
 public:
  explicit DtypeSplit(SafeKernelFunction native) : native_(std::move(native)) {
    for (auto& slot : by_dtype_) slot.store(nullptr);
  }

  void operator()(const OperatorHandle& op, DispatchKeySet keys, torch::jit::Stack* stack) {
    const auto dtype = call_dtype(op, *stack);
    const SafeKernelFunction* kernel = dtype ? by_dtype_[static_cast<size_t>(*dtype)].load() : nullptr;
    if (kernel != nullptr) {
      kernel->callBoxed(kernel->opHandle(), keys, stack);
    } else {
      native_.callBoxed(op, keys, stack);
    }
  }

  // Kernels are never freed: a call may be running one while another registration replaces it.
  void route(c10::ScalarType dtype, const SafeKernelFunction* kernel) {
    by_dtype_[static_cast<size_t>(dtype)].store(kernel);
  }

 private:
  SafeKernelFunction native_;
  std::array<std::atomic<const SafeKernelFunction*>, kNumDtypes> by_dtype_;
};

struct Installed {
  std::unique_ptr<torch::Library> library;  // keeps the registration alive
  DtypeSplit* split;                        // owned by the dispatcher through `library`
};

std::mutex registry_mutex;
std::map<std::pair<std::string, std::string>, Installed> installed;  // (op, key) -> split

OperatorHandle find_op(const std::string& op) {
  const auto dot = op.find('.', op.find("::"));
  const auto name = op.substr(0, dot);
  const auto overload = dot == std::string::npos ? "" : op.substr(dot + 1);
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle.has_value(), "torchplug: no operator named ", op);
  return *handle;
}

// Route `dtypes` of `op` at dispatch key `key` to the kernel that `kernel_op` has at `key`
// (to torch's own kernel when kernel_op is empty).
// Overriding torch's kernel is the point here, so torch's "overriding a previously registered
// kernel" warning is silenced while the split registers.
class SilentWarnings final : public c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

void route(const std::string& op, const std::string& key, const std::vector<py::object>& dtypes,
           const std::string& kernel_op) {
  std::lock_guard<std::mutex> guard(registry_mutex);
  const auto dispatch_key = c10::parseDispatchKey(key);
  auto target = find_op(op);
  auto& entry = installed[{op, key}];
  if (!entry.split) {
    auto native = target.getComputedKernelForDispatchKey(dispatch_key);
    auto split = std::make_unique<DtypeSplit>(std::move(native));
    entry.split = split.get();
    const auto& name = target.operator_name();
    const auto ns = name.name.substr(0, name.name.find("::"));
    SilentWarnings silent;
    c10::WarningUtils::WarningHandlerGuard quiet(&silent);
    entry.library = std::make_unique<torch::Library>(torch::Library::IMPL, ns, dispatch_key, __FILE__, __LINE__);
    const auto qualified = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    const auto unqualified = qualified.substr(ns.size() + 2);
    entry.library->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(split)));
  }
  // An empty kernel_op gives the dtypes back to the kernel torch had there.
  const SafeKernelFunction* kernel =
      kernel_op.empty() ? nullptr : new SafeKernelFunction(find_op(kernel_op).getComputedKernelForDispatchKey(dispatch_key));
  for (const auto& dtype : dtypes) {
    TORCH_CHECK_TYPE(THPDtype_Check(dtype.ptr()), "route: expected torch.dtype objects, got ", py::str(dtype).cast<std::string>());
    entry.split->route(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type, kernel);
  }
}

}  // namespace

void torchplug::bind_dtype_split(pybind11::module_& m) {
  m.def("route", &route, "route some dtypes of an op at a dispatch key to another op's kernel");
}
