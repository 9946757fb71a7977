// The kernel every c10d op gets under the dispatch key of a device torchplug serves: the op's CPU
// kernel, run on host tensors that stand for the device tensors.
//
// It refuses, before any data moves, tensors on more than one device or on another device type,
// and a group without a backend for the device type. It then replaces every device tensor on the
// stack by a host tensor, redispatches to the CPU kernel (which hands them to gloo), and puts the
// caller's device tensors back into the results, with gloo's Work wrapped by device_work(). The
// host tensor is, for an emulated device (host memory), a CPU tensor over the same bytes; for a
// staged device (memory of its own), a copy made through the device's copies, and the tensors the
// op writes are copied back when gloo's work has succeeded, before anyone sees it complete.
// All in C++: the same steps in Python cost about 60 us a call. A group
// that stands for the device's collective library first gets the call checked and rewritten by
// that library's rules (library_rules.cpp). One case goes to Python: an all_gather with outputs
// of different sizes, which NCCL and XCCL accept and gloo does not (uneven_allgather.py).
#include "collectives.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace torchplug_distributed {
namespace {

// A CPU tensor with `device`'s sizes, strides and offset over the same host memory; owns nothing.
at::Tensor host_alias(const at::Tensor& device) {
  return at::from_blob(device.data_ptr(), device.sizes(), device.strides(), device.options().device(at::kCPU));
}

// A CPU copy of `device`, made through the device's copies. Bytes move as gloo moves them on an
// alias, unseen by autograd.
at::Tensor host_copy(const at::Tensor& device) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return device.to(at::kCPU);
}

using CopiesBack = std::vector<std::pair<at::Tensor, at::Tensor>>;  // (caller's device tensor, its host copy)

void copy_back(const CopiesBack& copies) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  for (const auto& [device, host] : copies) {
    device.copy_(host);
  }
}

// Whether c10d op `name` writes its argument number `index`. ProcessGroup's API puts outputs first;
// an op not listed here (a later torch's) has every argument copied back, which is right whatever it writes.
bool writes_argument(const std::string& name, size_t index) {
  static const std::set<std::string> write_nothing = {"c10d::send", "c10d::barrier", "c10d::monitored_barrier_"};
  static const std::set<std::string> write_first = {
      "c10d::allreduce_", "c10d::allreduce_coalesced_", "c10d::broadcast_", "c10d::reduce_", "c10d::allgather_",
      "c10d::_allgather_base_", "c10d::allgather_coalesced_", "c10d::allgather_into_tensor_coalesced_",
      "c10d::reduce_scatter_", "c10d::_reduce_scatter_base_", "c10d::reduce_scatter_tensor_coalesced_",
      "c10d::alltoall_", "c10d::alltoall_base_", "c10d::gather_", "c10d::scatter_", "c10d::recv_",
      "c10d::recv_any_source_"};
  if (write_nothing.count(name)) {
    return false;
  }
  return index == 0 || !write_first.count(name);
}

// Every tensor in `value` (a tensor, a list, a list of lists), in order.
template <typename Visit>
void for_each_tensor(const c10::IValue& value, const Visit& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      for_each_tensor(element, visit);
    }
  }
}

// `value` with each tensor replaced by its host alias or, `staged`, its host copy, recorded in
// `aliases` and `hosts`; and in `copies_back` when `written`.
c10::IValue to_host(const c10::IValue& value, bool staged, bool written, AliasMap& aliases,
                    std::vector<at::Tensor>& hosts, CopiesBack& copies_back) {
  return map_tensors(value, [&](const at::Tensor& device) {
    at::Tensor host = staged ? host_copy(device) : host_alias(device);
    aliases.emplace(host.unsafeGetTensorImpl(), device);
    hosts.push_back(host);
    if (staged && written) {
      copies_back.emplace_back(device, host);
    }
    return host;
  });
}

bool is_class(const c10::IValue& value, const c10::ClassTypePtr& type) {
  return value.isCustomClass() && value.type() == type;
}

// c10d::allgather_(Tensor[][] outputs, Tensor[] inputs, ...) whose outputs differ in shape.
bool uneven_allgather(const std::string& name, c10::ArrayRef<c10::IValue> arguments) {
  if (name != "c10d::allgather_") {
    return false;
  }
  for (const c10::IValue& outputs : arguments[0].toListRef()) {
    const auto& slots = outputs.toListRef();
    for (const c10::IValue& slot : slots) {
      if (slot.toTensor().sizes() != slots[0].toTensor().sizes()) {
        return true;
      }
    }
  }
  return false;
}

// The uneven all_gather, as NCCL runs it (one broadcast per rank), on the host aliases on `stack`;
// leaves (outputs, gloo's Work) on the stack as the CPU kernel would.
void run_uneven_allgather(const c10::intrusive_ptr<c10d::ProcessGroup>& group, torch::jit::Stack* stack,
                          size_t num_arguments) {
  c10::IValue outputs = (*stack)[stack->size() - num_arguments];
  c10::IValue inputs = (*stack)[stack->size() - num_arguments + 1];
  // An op with a Python kernel (uneven_allgather.py): the dispatcher converts the arguments and the
  // Work, so this extension needs none of torch's Python headers.
  static const c10::OperatorHandle python =
      c10::Dispatcher::singleton().findSchemaOrThrow("torchplug_distributed::uneven_allgather", "");
  torch::jit::Stack call{outputs, inputs, c10::IValue(group)};
  python.callBoxed(&call);
  torch::jit::drop(*stack, num_arguments);
  torch::jit::push(*stack, std::move(outputs), std::move(call.at(0)));
}

class HostRoute final : public c10::OperatorKernel {
 public:
  HostRoute(std::string device_type, bool staged)
      : device_type_(std::move(device_type)), type_(c10::Device(device_type_).type()), staged_(staged) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) const {
    static const auto group_type = c10::getCustomClassType<c10::intrusive_ptr<c10d::ProcessGroup>>();
    static const auto work_type = c10::getCustomClassType<c10::intrusive_ptr<c10d::Work>>();
    const std::string name = op.schema().name();
    const size_t num_arguments = op.schema().arguments().size();
    auto arguments = torch::jit::last(*stack, num_arguments);

    c10::intrusive_ptr<c10d::ProcessGroup> group;
    std::vector<c10::Device> devices;
    for (const c10::IValue& argument : arguments) {
      if (is_class(argument, group_type)) {
        group = argument.toCustomClass<c10d::ProcessGroup>();
      }
      for_each_tensor(argument, [&](const at::Tensor& t) {
        if (std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
          devices.push_back(t.device());
        }
      });
    }
    check_single_device(name, devices);
    TORCH_CHECK(group, name, ": no process group among its arguments");
    TORCH_CHECK_VALUE(group->hasBackendForDeviceType(type_), name, " got ", device_type_,
                      " tensors, but process group '", group->getGroupName(), "' has no backend for '", device_type_,
                      "'. Create the group for this device: init_process_group() with no backend, or the device's "
                      "usual one (nccl for cuda, xccl for xpu), or e.g. 'cpu:gloo,", device_type_, ":torchplug'.");

    const bool uneven = uneven_allgather(name, arguments);
    AliasMap aliases;
    std::vector<at::Tensor> hosts;
    CopiesBack copies_back;
    const size_t first = stack->size() - num_arguments;
    for (size_t i = first; i < stack->size(); ++i) {
      const bool written = writes_argument(name, i - first);
      (*stack)[i] = to_host((*stack)[i], staged_, written, aliases, hosts, copies_back);
    }
    std::function<void()> finish;
    if (std::optional<std::string> library = library_of(*group, type_)) {
      finish = follow_library(*library, op.schema(), *stack, first, *group, aliases, hosts);
    }
    if (!copies_back.empty()) {  // after the library's own finishing, which writes the host tensors
      finish = [library_finish = std::move(finish), copies = std::move(copies_back)] {
        if (library_finish) {
          library_finish();
        }
        copy_back(copies);
      };
    }
    if (uneven) {
      run_uneven_allgather(group, stack, num_arguments);
    } else {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    }

    const size_t num_returns = op.schema().returns().size();
    for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
      c10::IValue& result = (*stack)[i];
      if (is_class(result, work_type)) {
        result = c10::IValue(device_work(result.toCustomClass<c10d::Work>(), hosts, aliases, name,
                                         group->getGroupName(), group->getRank(), std::move(finish)));
      } else {
        result = to_device(result, aliases);
      }
    }
  }

 private:
  void check_single_device(const std::string& name, const std::vector<c10::Device>& devices) const {
    if (devices.size() == 1 && devices[0].type() == type_) {
      return;
    }
    std::ostringstream found;
    for (size_t i = 0; i < devices.size(); ++i) {
      found << (i ? ", " : "") << devices[i];
    }
    TORCH_CHECK_VALUE(false, name, " on the ", staged_ ? "" : "emulated ", "'", device_type_,
                      "' device got tensors on ", found.str(),
                      ": a collective takes tensors on one ", device_type_, " device only (as NCCL/XCCL do). ",
                      "Move them with .to('", device_type_, "') first.");
  }

  std::string device_type_;
  c10::DeviceType type_;
  bool staged_;  // the device's memory is its own: host copies, not host aliases
};

// Registrations stay for the life of the process.
std::mutex libraries_mutex;
std::vector<std::unique_ptr<torch::Library>> libraries;

// CUDA and PrivateUse1 already have c10d kernels, which hand the device tensors to the group's
// backend for the device type. On a build without that device (the only place devices are
// emulated), and for a device bound to its own runtime, which has no collective library, ours
// replace them, which torch warns about.
class IgnoreWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace

void route_through_host(const std::string& op, const std::string& device_type, const std::string& dispatch_key,
                        bool staged) {
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "c10d", c10::parseDispatchKey(dispatch_key),
                                                  __FILE__, __LINE__);
  IgnoreWarnings ignore;
  c10::WarningUtils::WarningHandlerGuard guard(&ignore);
  library->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<HostRoute>(device_type, staged)));
  std::lock_guard<std::mutex> lock(libraries_mutex);
  libraries.push_back(std::move(library));
}

}  // namespace torchplug_distributed
