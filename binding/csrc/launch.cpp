// Device kernels for a runtime that runs host code on its memory (launch_host): torch's CPU kernel
// of an op, run inside the runtime's launch window on CPU tensors that alias the device memory.
// Nothing is copied for the op's device arguments, so in-place ops, random ops and out= ops stay
// on the device; fresh results are copied to the device after the launch.
#include "binding.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <exception>
#include <map>
#include <optional>
#include <vector>

namespace torchplug::binding {
namespace {

c10::DataPtr no_delete(void* data) { return {data, data, [](void*) {}, c10::Device(c10::DeviceType::CPU)}; }

bool takes_generator(const c10::Argument& argument) {
  const auto optional = argument.type()->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

class Launch {
 public:
  Launch(const c10::OperatorHandle& op, torch::jit::Stack* stack) : op_(op), stack_(stack) {}

  void run() {
    const size_t count = op_.schema().arguments().size();
    const size_t first = stack_->size() - count;
    for (size_t i = first; i < stack_->size(); ++i) (*stack_)[i] = to_host((*stack_)[i]);
    TORCH_CHECK(device_.has_value(), "torchplug: ", op_.schema().name(), " has no argument on the device");
    // A random op without a generator draws from the device's, not from the CPU's default one.
    for (size_t i = 0; i < count; ++i) {
      if ((*stack_)[first + i].isNone() && takes_generator(op_.schema().arguments()[i])) {
        (*stack_)[first + i] = default_generator(device_->index());
      }
    }
    // The kernel runs inside the runtime's C callback: exceptions are caught there and raised here.
    struct Call {
      Launch* self;
      std::exception_ptr error;
    } call{this, nullptr};
    const torchplug_host_kernel body = [](void* arguments) {
      auto* c = static_cast<Call*>(arguments);
      try {
        c->self->op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), c->self->stack_);
      } catch (...) {
        c->error = std::current_exception();
      }
    };
    launch_host(device_->index(), body, &call, op_.schema().name());
    if (call.error) std::rethrow_exception(call.error);
    const size_t results = op_.schema().returns().size();
    for (size_t i = stack_->size() - results; i < stack_->size(); ++i) (*stack_)[i] = to_device((*stack_)[i]);
  }

 private:
  // `value` with `f` applied to each tensor it holds (a tensor, or a list of tensors or optional ones).
  template <typename F>
  static c10::IValue map_tensors(const c10::IValue& value, F f) {
    if (value.isTensor()) return f(value.toTensor());
    if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorList()) list.push_back(f(t));
      return list;
    }
    if (value.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (std::optional<at::Tensor> t : value.toOptionalTensorList()) {
        list.push_back(t.has_value() ? std::optional<at::Tensor>(f(*t)) : std::nullopt);
      }
      return list;
    }
    return value;
  }

  // A CPU tensor over the same bytes as the device tensor `value` (one CPU storage per device storage).
  c10::IValue to_host(const c10::IValue& value) {
    if (value.isDevice() && value.toDevice().type() == kType) {
      note_device(value.toDevice());
      return c10::Device(c10::DeviceType::CPU);
    }
    return map_tensors(value, [this](const at::Tensor& t) { return alias(t); });
  }

  at::Tensor alias(const at::Tensor& tensor) {
    if (!tensor.defined() || tensor.device().type() != kType) return tensor;
    note_device(tensor.device());
    c10::StorageImpl* key = tensor.storage().unsafeGetStorageImpl();
    auto found = hosts_.find(key);
    if (found == hosts_.end()) {
      c10::Storage host(c10::Storage::use_byte_size_t(), tensor.storage().nbytes(),
                        no_delete(tensor.storage().mutable_data()), nullptr, /*resizable=*/false);
      found = hosts_.emplace(key, std::make_pair(host, tensor.storage())).first;
    }
    return at::empty({0}, tensor.options().device(c10::DeviceType::CPU))
        .set_(found->second.first, tensor.storage_offset(), tensor.sizes(), tensor.strides());
  }

  // A result: over an argument's bytes (in-place, out=, a view) it is that device memory again;
  // anything else the CPU kernel made is copied to the device.
  c10::IValue to_device(const c10::IValue& value) {
    return map_tensors(value, [this](const at::Tensor& t) { return back(t); });
  }

  at::Tensor back(const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.is_cpu()) return tensor;
    for (const auto& [key, pair] : hosts_) {
      if (pair.first.is_alias_of(tensor.storage())) {
        return at::empty({0}, tensor.options().device(*device_))
            .set_(pair.second, tensor.storage_offset(), tensor.sizes(), tensor.strides());
      }
    }
    at::Tensor result = at::empty_strided(tensor.sizes(), tensor.strides(), tensor.options().device(*device_));
    result.copy_(tensor);
    return result;
  }

  void note_device(c10::Device device) {
    const c10::Device resolved = device.has_index() ? device : c10::Device(kType, static_cast<c10::DeviceIndex>(current_device()));
    if (!device_.has_value()) device_ = resolved;
  }

  const c10::OperatorHandle& op_;
  torch::jit::Stack* stack_;
  std::optional<c10::Device> device_;
  std::map<c10::StorageImpl*, std::pair<c10::Storage, c10::Storage>> hosts_;  // device storage -> (alias, itself)
};

void launch_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_CHECK(runtime().launch_host != nullptr, "torchplug: ", op.schema().name(),
              " is registered as a host kernel, but the device's runtime has no launch_host");
  Launch(op, stack).run();
}

thread_local bool in_window = false;

}  // namespace

void launch_host(int32_t device, torchplug_host_kernel kernel, void* arguments, const std::string& what) {
  TORCH_CHECK(runtime().launch_host != nullptr, "torchplug: ", what, " runs inside the device runtime's launch_host, ",
              "which this runtime does not have");
  TORCH_CHECK(!in_window, "torchplug: ", what, " was launched from inside another host kernel's launch_host window; ",
              "windows do not nest");
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(kType)->getStream(c10::Device(kType, device));
  in_window = true;
  const torchplug_status status = runtime().launch_host(device, stream_handle(stream), kernel, arguments);
  in_window = false;
  check(status, "launch_host");
  ++stats(device).launches;
}

bool register_launch_kernel(const std::string& op) {
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  const std::string qualified = op.rfind("aten::", 0) == 0 ? op : "aten::" + op;
  const size_t dot = qualified.find('.');
  const auto handle = c10::Dispatcher::singleton().findOp(
      {qualified.substr(0, dot), dot == std::string::npos ? "" : qualified.substr(dot + 1)});
  if (!handle.has_value()) return false;  // a TorchScript-only schema: nothing dispatches it
  // Never override: the binding's own kernels (set_, resize_, ...), a vendor's, or a composite whose
  // pieces reach the device separately (squeeze_ changes the tensor's metadata, not its memory).
  for (const c10::DispatchKey key : {c10::DispatchKey::PrivateUse1, c10::DispatchKey::CompositeImplicitAutograd,
                                     c10::DispatchKey::CompositeExplicitAutograd,
                                     c10::DispatchKey::CompositeExplicitAutogradNonFunctional}) {
    if (handle->hasKernelForDispatchKey(key)) return false;
  }
  library.impl(qualified.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunction<&launch_kernel>());
  return true;
}

}  // namespace torchplug::binding
