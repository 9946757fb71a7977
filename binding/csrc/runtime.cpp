// The bound runtime table and the error convention: each failing call names the plugin, the call
// and the runtime's own explanation.
#include "binding.h"

#include <c10/util/Exception.h>

namespace torchplug::binding {
namespace {

const torchplug_device_runtime* bound = nullptr;
std::string plugin_name;

const char* status_name(torchplug_status status) {
  switch (status) {
    case TORCHPLUG_SUCCESS: return "TORCHPLUG_SUCCESS";
    case TORCHPLUG_ERROR_INVALID_DEVICE: return "TORCHPLUG_ERROR_INVALID_DEVICE";
    case TORCHPLUG_ERROR_OUT_OF_MEMORY: return "TORCHPLUG_ERROR_OUT_OF_MEMORY";
    case TORCHPLUG_ERROR_INVALID_VALUE: return "TORCHPLUG_ERROR_INVALID_VALUE";
    case TORCHPLUG_ERROR_NOT_READY: return "TORCHPLUG_ERROR_NOT_READY";
    case TORCHPLUG_ERROR_UNSUPPORTED: return "TORCHPLUG_ERROR_UNSUPPORTED";
    default: return "TORCHPLUG_ERROR_INTERNAL";
  }
}

}  // namespace

void bind(const torchplug_device_runtime* table, const std::string& plugin) {
  // The Python side checked the version with a message naming the plugin; this guards the C side.
  TORCH_CHECK(table != nullptr && table->abi_version == TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION &&
                  table->struct_size >= sizeof(torchplug_device_runtime),
              "torchplug: the runtime of plugin '", plugin, "' does not match device-runtime ABI version ",
              TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION);
  TORCH_CHECK(bound == nullptr || bound == table, "torchplug: a device runtime is already bound to PrivateUse1 (plugin '",
              plugin_name, "'); torch has one PrivateUse1 device per process");
  plugin_name = plugin;
  bound = table;
}

const torchplug_device_runtime& runtime() {
  TORCH_CHECK(bound != nullptr, "torchplug: no device runtime is bound to PrivateUse1");
  return *bound;
}

void check(torchplug_status status, const char* call) {
  if (status == TORCHPLUG_SUCCESS) {
    return;
  }
  const char* why = bound->last_error ? bound->last_error() : "";
  TORCH_CHECK_WITH(OutOfMemoryError, status != TORCHPLUG_ERROR_OUT_OF_MEMORY, "torchplug: plugin '", plugin_name,
                   "': ", call, " ran out of device memory: ", why);
  TORCH_CHECK(false, "torchplug: plugin '", plugin_name, "': its runtime's ", call, " failed with ",
              status_name(status), ": ", why);
}

int32_t device_count() {
  int32_t count = 0;
  check(runtime().device_count(&count), "device_count");
  return count;
}

int32_t current_device() {
  int32_t device = 0;
  check(runtime().get_device(&device), "get_device");
  return device;
}

void set_device(int32_t device) {
  TORCH_CHECK(device >= 0 && device < device_count(), "torchplug: plugin '", plugin_name, "': invalid device ordinal ",
              device, " (the runtime reports ", device_count(), " devices)");
  check(runtime().set_device(device), "set_device");
}

DeviceScope::DeviceScope(int32_t device) : previous_(current_device()), device_(device) {
  if (previous_ != device_) check(runtime().set_device(device_), "set_device");
}

DeviceScope::~DeviceScope() {
  if (previous_ != device_) runtime().set_device(previous_);  // a destructor must not throw
}

void copy(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind, c10::DeviceIndex device,
          bool wait) {
  if (nbytes == 0) return;
  // The contract's memcpy is ordered after the default stream only; torch orders a copy after the
  // current stream's work, which may be another stream.
  const DeviceScope scope(device);
  const torchplug_stream stream = current_stream(device);
  check(runtime().memcpy_async(destination, source, nbytes, kind, stream), "memcpy_async");
  if (wait) check(runtime().stream_synchronize(stream), "stream_synchronize");
}

}  // namespace torchplug::binding
