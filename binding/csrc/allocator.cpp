// torch's allocator for the device: every block comes from the runtime's malloc and goes back to its
// free; memory_allocated and max_memory_allocated count the bytes asked for.
#include "binding.h"

#include <c10/util/Exception.h>

#include <array>

namespace torchplug::binding {
namespace {

std::array<DeviceStats, kMaxDevices> all_stats;

struct Block {
  void* data;
  size_t nbytes;
  int32_t device;
};

void free_block(void* context) {
  auto* block = static_cast<Block*>(context);
  if (block->data != nullptr) {
    runtime().free(block->device, block->data);  // a destructor must not throw: a failed free is only leaked
  }
  all_stats[block->device].allocated -= static_cast<int64_t>(block->nbytes);
  delete block;
}

class RuntimeAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const int32_t device = current_device();
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "torchplug: device index ", device, " is out of range");
    void* data = nullptr;
    if (nbytes != 0) {
      check(runtime().malloc(device, nbytes, &data), "malloc");
    }
    DeviceStats& counted = all_stats[device];
    const int64_t now = counted.allocated += static_cast<int64_t>(nbytes);
    int64_t peak = counted.peak.load();
    while (now > peak && !counted.peak.compare_exchange_weak(peak, now)) {
    }
    return {data, new Block{data, nbytes, device}, &free_block, c10::Device(kType, static_cast<c10::DeviceIndex>(device))};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* destination, const void* source, size_t count) const override {
    copy(destination, source, count, TORCHPLUG_DEVICE_TO_DEVICE, static_cast<c10::DeviceIndex>(current_device()));
  }
};

RuntimeAllocator allocator;

}  // namespace

c10::Allocator* device_allocator() { return &allocator; }

DeviceStats& stats(int32_t device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "torchplug: device index ", device, " is out of range");
  return all_stats[device];
}

}  // namespace torchplug::binding
