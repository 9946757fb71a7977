// DDP's Reducer times every iteration with a c10d Timer made for its parameters' device type.
// torch registers one for the CPU, and a CUDA build one for 'cuda' that records CUDA events; a CPU
// wheel has none for 'cuda', and no build has one for a PrivateUse1 device, so DDP there tripped
// an internal assert (logger.cpp) on its first forward; a CUDA build's timer records CUDA events,
// which an emulated device lacks. Emulated devices run their kernels synchronously on the host, and
// so does a device whose runtime finishes its work before each call returns (the example device),
// so host timestamps measure what a device timer would; for an asynchronous runtime they time the
// host's side only (DDP logs them, nothing more).
#include "collectives.h"

#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <set>

namespace torchplug_distributed {

namespace {

class HostTimer final : public c10d::Timer {
 public:
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const std::optional<int64_t> started = getTimestamp(start);
    const std::optional<int64_t> ended = getTimestamp(end);
    if (!started || !ended) {
      return std::nullopt;
    }
    return *ended - *started;
  }
};

}  // namespace

bool register_host_timer(const std::string& device_type) {
  static std::mutex mutex;
  static std::set<c10::DeviceType> registered;
  const c10::DeviceType type = c10::Device(device_type).type();
  std::lock_guard<std::mutex> lock(mutex);
  if (!registered.insert(type).second) {
    return false;
  }
  // Preferred over a build's own timer for the type (a CUDA build's records CUDA events, which the
  // emulated device has none of).
  c10d::TimerRegistry()->Register(
      type, [](c10::Device) -> std::unique_ptr<c10d::Timer> { return std::make_unique<HostTimer>(); },
      c10::REGISTRY_PREFERRED);
  return true;
}

}  // namespace torchplug_distributed
