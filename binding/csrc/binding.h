// torchplug's binding of a device runtime (include/torchplug/device_runtime.h) to torch: everything
// between the vendor's C table and torch, written once for any device that takes PrivateUse1.
//
// Device memory is never read by the host here: every byte moves through the runtime's copies.
#pragma once

// The contract, by its place in the package (torchplug/entrypoints/include), so that the build flags
// and with them the build cache do not depend on where torchplug is installed.
#include "../../entrypoints/include/torchplug/device_runtime.h"

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace at {
class Generator;
}  // namespace at

namespace c10 {
struct StorageImpl;
}  // namespace c10

namespace torchplug::binding {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

// ---- runtime.cpp: the bound table ------------------------------------------------------------
void bind(const torchplug_device_runtime* table, const std::string& plugin);
const torchplug_device_runtime& runtime();  // raises if nothing is bound
// Raises a torch error naming the plugin, the runtime call and the runtime's last_error() unless
// `status` is TORCHPLUG_SUCCESS (out of memory raises torch.OutOfMemoryError).
void check(torchplug_status status, const char* call);
int32_t device_count();
int32_t current_device();
void set_device(int32_t device);
// A copy ordered on the current stream of `device` (the device side of the copy), as torch's CUDA
// copies are: after the work already queued there. `wait` returns only once it is done; without it
// the host memory involved must stay alive and unchanged until the stream reaches the copy.
// While alive, the runtime's current device (per host thread) is `device`: a NULL stream handle means
// the current device's default stream, so calls that pass one for a device run inside such a scope.
class DeviceScope {
 public:
  explicit DeviceScope(int32_t device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int32_t previous_;
  int32_t device_;
};
void copy(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind, c10::DeviceIndex device,
          bool wait = true);

// ---- dtypes.cpp ------------------------------------------------------------------------------
// `all_names`: every dtype's Python name (torch.float32), for messages.
void declare_dtypes(const std::vector<c10::ScalarType>& dtypes, const std::map<c10::ScalarType, std::string>& all_names,
                    const std::string& device);
void check_dtype(c10::ScalarType dtype);  // raises TypeError for a dtype the plugin does not declare

// ---- allocator.cpp ---------------------------------------------------------------------------
struct DeviceStats {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> launches{0};  // host kernels run through launch_host
};
constexpr int kMaxDevices = 64;
c10::Allocator* device_allocator();
DeviceStats& stats(int32_t device);

// ---- guard.cpp -------------------------------------------------------------------------------
void register_guard();
torchplug_stream stream_handle(const c10::Stream& stream);  // NULL for the default stream
torchplug_stream current_stream(c10::DeviceIndex device);  // the thread's current stream on `device`

// ---- kernels.cpp -----------------------------------------------------------------------------
void register_kernels();
void register_hooks();  // hooks.cpp
bool is_pinned(const void* pointer);  // hooks.cpp: whether `pointer` lies in the runtime's pinned host memory
at::Generator& default_generator(int32_t device);  // hooks.cpp: the device's own (-1: the current device's)
void register_autocast();  // autocast.cpp
// launch.cpp: run `kernel(arguments)` inside the runtime's launch_host window on `device`, ordered on its
// current stream, and count it. Windows never nest (a runtime's window need not be re-entrant): a launch
// from inside one raises, naming `what`.
void launch_host(int32_t device, torchplug_host_kernel kernel, void* arguments, const std::string& what);
// `op` ("aten::fill_.Scalar") runs its CPU kernel inside the runtime's launch_host window.
// False (and nothing registered) where the op has a device or composite kernel already, or is no
// dispatcher op.
bool register_launch_kernel(const std::string& op);
// Storage.resize_ and resize_ beyond the storage: a new block holding the old bytes that still fit.
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

}  // namespace torchplug::binding
