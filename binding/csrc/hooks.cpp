// torch's PrivateUse1 hooks for the bound device, and pinned host memory from the runtime.
//
// Random numbers: ops without a kernel of the device's own run on the CPU (the staging fallback),
// where they draw from the CPU generator; the hooks hand that generator out, so torch.manual_seed
// makes device random numbers reproducible.
#include "binding.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>

namespace torchplug::binding {
namespace {

void free_pinned(void* data) {
  if (data != nullptr) runtime().host_free(data);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nullptr;
    if (nbytes != 0) check(runtime().host_malloc(nbytes, &data), "host_malloc");
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
  const at::Generator& getDefaultGenerator(c10::DeviceIndex /*device*/) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex /*device*/) const override { return at::detail::createCPUGenerator(); }
  at::Device getDeviceFromPtr(void* /*data*/) const override { return c10::Device(kType, getCurrentDevice()); }
  bool isPinnedPtr(const void* /*data*/) const override { return false; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &pinned; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), nbytes);
  }
};

}  // namespace

void register_hooks() {
  static Hooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
}

}  // namespace torchplug::binding
