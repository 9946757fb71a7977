// What the parts of torchplug.distributed's extension share: the alias map, the Work wrapper and
// the C++ route of c10d ops on torchplug's devices.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/stack.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace torchplug_distributed {

// Host tensor (an alias, or a staged copy) TensorImpl -> the caller's device tensor.
using AliasMap = std::unordered_map<const c10::TensorImpl*, at::Tensor>;

// `value` (a tensor, a list of them, a list of lists) with each tensor t replaced by map(t); lists
// are rebuilt with their element type, anything else is returned as it is.
template <typename Map>
c10::IValue map_tensors(const c10::IValue& value, const Map& map) {
  if (value.isTensor()) {
    return map(value.toTensor());
  }
  if (value.isList()) {
    auto list = value.toList();
    c10::impl::GenericList mapped(list.elementType());
    mapped.reserve(list.size());
    for (const c10::IValue& element : list) {
      mapped.push_back(map_tensors(element, map));
    }
    return mapped;
  }
  return value;
}

// `value` with every host tensor in it replaced by its device tensor.
c10::IValue to_device(const c10::IValue& value, const AliasMap& aliases);

// gloo's `work` over `hosts`, made to complete with the device tensors `aliases` maps them to and
// to explain its failures; kept until gloo lets go of it (device_work.cpp). `finish`, if set, runs
// when gloo's work has succeeded, before anyone sees the result. A work without a future
// (send/recv) keeps gloo's own errors; it is returned unchanged unless there is a `finish`, which
// then runs when the caller first sees it complete (wait(), is_completed()).
c10::intrusive_ptr<c10d::Work> device_work(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> hosts,
                                           AliasMap aliases, std::string op, std::string group, int group_rank,
                                           std::function<void()> finish = {});

// The collective library ("nccl", "xccl") whose rules `group` follows on `type`, if any (library_rules.cpp).
std::optional<std::string> library_of(const c10d::ProcessGroup& group, c10::DeviceType type);

// Apply `library`'s rules to the call of `schema` whose arguments, host aliases already, start at
// stack[first]: check it as the library would, rewrite it into one gloo runs (registering new host
// tensors in `aliases` and `hosts`); returns what must run when gloo's work completes, if anything.
std::function<void()> follow_library(const std::string& library, const c10::FunctionSchema& schema,
                                     torch::jit::Stack& stack, size_t first, const c10d::ProcessGroup& group,
                                     AliasMap& aliases, std::vector<at::Tensor>& hosts);

// Register the C++ route (host_route.cpp) as c10d::`op`'s kernel for `dispatch_key`, the key of
// `device_type`: on host aliases of its tensors, or `staged` through host copies of them.
void route_through_host(const std::string& op, const std::string& device_type, const std::string& dispatch_key,
                        bool staged);

// DDP's iteration timer for a device type that torch has none for (host_timer.cpp).
bool register_host_timer(const std::string& device_type);

}  // namespace torchplug_distributed
