// torch's PrivateUse1 hooks for the bound device, pinned host memory from the runtime, and each
// device's random number generator.
//
// Random numbers: the device's random ops run torch's CPU kernels (inside launch_host, or through the
// staging fallback), which draw from CPU generators. Each device has a default generator of its own
// (a CPU generator the launch kernels pass in, launch.cpp), so seeding the device leaves the CPU's
// random numbers alone and the CPU's draws leave the device's alone, as with CUDA's generators.
#include "binding.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

namespace torchplug::binding {
namespace {

// The runtime's pinned blocks (start -> size), so that is_pinned() and non_blocking copies know them.
std::mutex pinned_mutex;
std::map<uintptr_t, size_t> pinned_blocks;

void free_pinned(void* data) {
  if (data == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(pinned_mutex);
    pinned_blocks.erase(reinterpret_cast<uintptr_t>(data));
  }
  runtime().host_free(data);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nullptr;
    if (nbytes != 0) {
      check(runtime().host_malloc(nbytes, &data), "host_malloc");
      std::lock_guard<std::mutex> lock(pinned_mutex);
      pinned_blocks[reinterpret_cast<uintptr_t>(data)] = nbytes;
    }
    return {data, data, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* destination, const void* source, size_t count) const override {
    default_copy_data(destination, source, count);
  }
};

PinnedAllocator pinned;

struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex /*device*/) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count()); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return static_cast<c10::DeviceIndex>(current_device()); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex previous = getCurrentDevice();
    if (previous != device) set_device(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex /*device*/) const override { return at::detail::createCPUGenerator(); }
  at::Device getDeviceFromPtr(void* /*data*/) const override { return c10::Device(kType, getCurrentDevice()); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &pinned; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), nbytes);
  }
};

}  // namespace

at::Generator& default_generator(int32_t device) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (int32_t i = 0; i < device_count(); ++i) generators.push_back(at::detail::createCPUGenerator());
  });
  if (device < 0) device = current_device();
  TORCH_CHECK(device < static_cast<int32_t>(generators.size()), "torchplug: no generator for device ", device,
              " (the runtime reports ", generators.size(), " devices)");
  return generators[device];
}

bool is_pinned(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  std::lock_guard<std::mutex> lock(pinned_mutex);
  auto after = pinned_blocks.upper_bound(address);
  if (after == pinned_blocks.begin()) return false;
  const auto& [start, nbytes] = *std::prev(after);
  return address < start + nbytes;
}

void register_hooks() {
  static Hooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
}

}  // namespace torchplug::binding
