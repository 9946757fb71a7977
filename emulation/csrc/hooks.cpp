// torch's accelerator hooks for emulated devices: what lets autograd run backward on them.
//
// torch knows one "current accelerator" per process (at::getAccelerator(), which asks each hook
// object's isBuilt()); autograd's stream bookkeeping serves only that device type and trips an
// internal assert for gradients on any other accelerator type. A CPU wheel has none. So these
// hooks report an emulated type as built only while it is the *active* accelerator
// (set_accelerator), which the Python runtime switches to the device type of each backward call.
//
// The XPU and MPS hook registries are read lazily, the first time anything asks torch for its
// accelerator, so registering here at load time works as long as the runtime loads first. A
// PrivateUse1 device registers its hooks explicitly. CUDA's hooks object is created while
// `import torch` runs, before any plugin: swap_cuda_hooks replaces its dynamic type in place
// (destroy, then construct CudaHooks in the same memory; CudaHooks adds no data members), so every
// caller of at::detail::getCUDAHooks() reaches these hooks from then on. See docs/emulation.md for
// what each hook answers and which ATen paths read them.
// The hooks also hand out "pinned" host memory, for pin_memory() and non_blocking copies, and the
// devices' random generators (torch.Generator(device=...)).
#include "emulation.h"

#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/MPSHooksInterface.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/detail/XPUHooksInterface.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cstring>
#include <mutex>
#include <new>
#include <typeinfo>
#include <unordered_set>

// torch 2.11's hook interfaces have no generator entry points.
#define TORCHPLUG_HOOKS_HAVE_GENERATORS (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 13)

namespace torchplug::emulation {

namespace {

std::atomic<int> g_active{-1};  // the DeviceType reported as torch's accelerator, -1 for none

bool active(c10::DeviceType type) {
  return g_active.load(std::memory_order_relaxed) == static_cast<int>(type) && is_emulated(type);
}

// Frees a block of PinnedAllocator through the runtime's host_free.
void free_pinned(void* data) {
  if (pinned_runtime().host_free(data) != TORCHPLUG_SUCCESS) {
    TORCH_WARN("torchplug emulation: freeing pinned host memory failed: ", pinned_runtime().last_error());
  }
}

// Pinned memory is the host runtime's host_malloc: plain host memory, which the emulated devices read
// directly, so it is as pinned as it gets.
class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nullptr;
    check_runtime(pinned_runtime().host_malloc(nbytes, &data));
    return c10::DataPtr(data, data, &free_pinned, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &free_pinned;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

// The part every emulated type's hooks share; `Base` is torch's hooks interface for the type.
template <typename Base, c10::DeviceType kType>
class Hooks : public Base {
 public:
  bool isBuilt() const override {
    return active(kType);
  }
  bool isAvailable() const override {
    return active(kType);
  }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return is_emulated(kType) && device_index >= 0 && device_index < state(kType).count;
  }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return is_emulated(kType) ? static_cast<c10::DeviceIndex>(state(kType).count) : 0;
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned(data);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    TORCH_CHECK(is_emulated(kType), "pinned memory for ", kType, " needs a ", kType, " device; none is emulated");
    return &g_pinned_allocator;
  }
#if TORCHPLUG_HOOKS_HAVE_GENERATORS
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index = -1) const override {
    return default_generator(c10::Device(kType, device_index));
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index = -1) const override {
    return new_generator(c10::Device(kType, device_index));
  }
#endif
};

// Serves an emulated 'cuda' on a CPU wheel, and mutes torch's real CUDA hooks on a CUDA build that
// sees no GPU (cuda is not emulated there, so it reports no device). It never claims cuDNN, cuBLAS,
// MAGMA or any other CUDA library: the inherited defaults say none is compiled in, which keeps CPU
// kernels on their CPU paths (e.g. convolution never selects cuDNN for an emulated cuda tensor).
class CudaHooks final : public Hooks<at::CUDAHooksInterface, c10::DeviceType::CUDA> {
 public:
  bool hasCUDA() const override {
    return is_emulated(c10::DeviceType::CUDA);
  }
  c10::DeviceIndex current_device() const override {
    return is_emulated(c10::DeviceType::CUDA) ? emulation::current_device(c10::DeviceType::CUDA) : -1;
  }
  void deviceSynchronize(c10::DeviceIndex /*device_index*/) const override {}
  std::string showConfig() const override {
    return is_emulated(c10::DeviceType::CUDA)
               ? "  - CUDA: emulated by torchplug in host memory (no CUDA runtime, cuDNN, cuBLAS or NCCL)\n"
               : "  - CUDA: built, but no GPU is visible; torchplug muted its accelerator hooks\n";
  }
};
// Constructed in memory that held torch's own hooks object: it must not need more.
static_assert(sizeof(CudaHooks) == sizeof(at::CUDAHooksInterface), "CudaHooks must add no data members");

class XpuHooks final : public Hooks<at::XPUHooksInterface, c10::DeviceType::XPU> {
 public:
  XpuHooks() = default;
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13  // torch 2.11's registry constructs hooks with args
  explicit XpuHooks(at::XPUHooksArgs /*unused*/) {}
#endif
  bool hasXPU() const override {
    return active(c10::DeviceType::XPU);
  }
  c10::DeviceIndex getNumGPUs() const override {
    return deviceCount();
  }
  c10::DeviceIndex current_device() const override {
    return emulation::current_device(c10::DeviceType::XPU);
  }
  void deviceSynchronize(c10::DeviceIndex /*device_index*/) const override {}
};

class MpsHooks final : public Hooks<at::MPSHooksInterface, c10::DeviceType::MPS> {
 public:
  MpsHooks() = default;
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
  explicit MpsHooks(at::MPSHooksArgs /*unused*/) {}
#endif
  bool hasMPS() const override {
    return active(c10::DeviceType::MPS);
  }
  void deviceSynchronize() const override {}
  void commitStream() const override {}
  void emptyCache() const override {}
  size_t getCurrentAllocatedMemory() const override {
    return static_cast<size_t>(state(c10::DeviceType::MPS).stats[0].bytes[kAllPools].current.load());
  }
};

class PrivateUse1Hooks final : public Hooks<at::PrivateUse1HooksInterface, c10::DeviceType::PrivateUse1> {
 public:
  // storage.resize_() on an emulated PrivateUse1 storage comes here.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), new_bytes);
  }
};

}  // namespace

}  // namespace torchplug::emulation

// Registered under the names torch's getXPUHooks()/getMPSHooks() look up.
namespace at {
C10_REGISTER_TYPED_CLASS(XPUHooksRegistry, "XPUHooks", torchplug::emulation::XpuHooks)
C10_REGISTER_TYPED_CLASS(MPSHooksRegistry, "MPSHooks", torchplug::emulation::MpsHooks)
}  // namespace at

namespace torchplug::emulation {

bool register_privateuse1_hooks() {
  static std::once_flag once;
  static bool registered = false;
  std::call_once(once, [] {
    if (!at::isPrivateUse1HooksRegistered()) {
      at::RegisterPrivateUse1HooksInterface(new PrivateUse1Hooks());  // lives for the process
      registered = true;
    }
  });
  return registered;
}

void set_accelerator(c10::DeviceType type) {
  g_active.store(static_cast<int>(type), std::memory_order_relaxed);
}

namespace {

std::mutex g_cuda_hooks_mutex;
std::string g_cuda_hooks_state = "torch";

// Replace the dynamic type of torch's CUDA hooks object, once, with CudaHooks in `new_state`:
// "emulated" replaces the CPU wheel's stub or a CUDA build's real hooks (whose GPU is absent,
// or forced aside: attach.py decides); "muted" replaces only a CUDA build's real hooks.
void replace_cuda_hooks(const char* new_state) {
  std::lock_guard<std::mutex> lock(g_cuda_hooks_mutex);
  if (g_cuda_hooks_state == new_state) {
    return;  // only once
  }
  TORCH_CHECK(g_cuda_hooks_state == "torch", "torch's CUDA hooks are already ", g_cuda_hooks_state);
  auto& hooks = const_cast<at::CUDAHooksInterface&>(at::detail::getCUDAHooks());
  const bool is_stub = typeid(hooks) == typeid(at::CUDAHooksInterface);
  TORCH_CHECK(!(is_stub && std::string(new_state) == "muted"),
              "torchplug will not mute torch's CUDA hooks: this torch has no CUDA runtime to mute");
  hooks.~CUDAHooksInterface();
  new (&hooks) CudaHooks();
  g_cuda_hooks_state = new_state;
}

}  // namespace

void swap_cuda_hooks() {
  replace_cuda_hooks("emulated");
}

void mute_cuda_hooks() {
  replace_cuda_hooks("muted");
}

std::string cuda_hooks_state() {
  std::lock_guard<std::mutex> lock(g_cuda_hooks_mutex);
  return g_cuda_hooks_state;
}

}  // namespace torchplug::emulation
