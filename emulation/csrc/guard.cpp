// DeviceGuardImpl for emulated device types: the current device, streams and events, over the type's
// host runtime (host_runtime.cpp), as torchplug's binding does over a vendor's runtime.
//
// Kernels run synchronously on the calling thread, so every stream is always idle and an event
// completes when it is recorded. The API semantics still hold: the current device and stream are
// per thread (as with cudaSetDevice), indices are range-checked, and events recorded with timing
// enabled report the host time between them. The current stream per thread is torch's notion (the
// contract has none), so it lives here; graph captures' checks run before the runtime is called.
#include "device_types.h"
#include "emulation.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace torchplug::emulation {

namespace {

// Streams are tracked per (emulated type, index).
thread_local std::array<std::array<int64_t, kMaxDevices>, kEmulatedTypes.size()> t_current_stream{};
std::atomic<int64_t> g_pool_cursor{0};

torchplug_stream handle(const c10::Stream& stream) {
  return reinterpret_cast<torchplug_stream>(static_cast<uintptr_t>(stream.id()));
}

torchplug_event event_handle(void* event) {
  return static_cast<torchplug_event>(event);
}

class EmulatedGuard final : public c10::impl::DeviceGuardImplInterface {
 public:
  explicit EmulatedGuard(c10::DeviceType type) : type_(type), runtime_(host_runtime(type)) {}

  c10::DeviceType type() const override {
    return type_;
  }
  c10::Device exchangeDevice(c10::Device device) const override {
    return c10::Device(type_, exchange_device(type_, device.index()));
  }
  c10::Device getDevice() const override {
    return c10::Device(type_, current_device(type_));
  }
  void setDevice(c10::Device device) const override {
    exchange_device(type_, device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    static_cast<void>(runtime_.set_device(device.index()));  // an index out of range leaves the device as it is
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(state(type_).count);
  }
  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override {
    c10::DeviceCapability capability;
    capability.capability_data.capability_bits &= state(type_).dtype_mask;
    return capability;
  }

  c10::Stream getStream(c10::Device device) const override {
    c10::Stream stream = make_stream(device, 0);
    return make_stream(stream.device(), current_stream_id(stream.device()));
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return make_stream(device, 0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*isHighPriority*/) const override {
    return make_stream(device, 1 + g_pool_cursor.fetch_add(1) % kPoolStreams);
  }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    torchplug_stream created = nullptr;
    check_runtime(runtime_.stream_create(&created, priority));
    return make_stream(device, static_cast<int64_t>(reinterpret_cast<uintptr_t>(created)));
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    c10::Device device = make_stream(stream.device(), 0).device();
    c10::Stream previous = make_stream(device, current_stream_id(device));
    t_current_stream[emulated_slot(type_)][device.index()] = stream.id();
    return previous;
  }
  bool queryStream(const c10::Stream& stream) const override {
    graph_check_stream(stream, "querying");
    return ready(runtime_.stream_query(handle(stream)));
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    graph_check_stream(stream, "synchronizing");
    check_runtime(runtime_.stream_synchronize(handle(stream)));
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    check_index(type_, device_index);
    graph_check_device_sync(c10::Device(type_, device_index));
    check_runtime(runtime_.synchronize(device_index));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(), "Event device index ", device_index,
        " does not match recording stream's device index ", stream.device_index(), ".");
    if (*event == nullptr) {
      // torch.Event(enable_timing=True) asks for the backend default, which times events.
      torchplug_event created = nullptr;
      check_runtime(runtime_.event_create(&created, flag == c10::EventFlag::BACKEND_DEFAULT));
      *event = created;
    }
    check_runtime(runtime_.event_record(event_handle(*event), handle(stream)));
    graph_note_event_record(*event, stream);  // a capturing stream's event completes only on replay
  }
  void block(void* event, const c10::Stream& stream) const override {
    graph_note_event_block(event, stream);  // waiting on a capturing stream joins its capture
    if (event != nullptr) {
      check_runtime(runtime_.stream_wait_event(handle(stream), event_handle(event)));
    }
  }
  bool queryEvent(void* event) const override {
    graph_check_event(event, type_, "querying");
    return event == nullptr || ready(runtime_.event_query(event_handle(event)));
  }
  void synchronizeEvent(void* event) const override {
    graph_check_event(event, type_, "synchronizing");
    if (event != nullptr) {
      check_runtime(runtime_.event_synchronize(event_handle(event)));
    }
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    graph_forget_event(event);
    if (event != nullptr) {
      static_cast<void>(runtime_.event_destroy(event_handle(event)));
    }
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "Both events must be recorded before calculating elapsed time.");
    float milliseconds = 0;
    check_runtime(runtime_.event_elapsed_time(&milliseconds, event_handle(start), event_handle(end)));
    return milliseconds;
  }

 private:
  // Streams are bookkeeping only, so any index a torch internal asks about gets one; the device
  // module's functions check indices against the device count themselves.
  c10::Stream make_stream(c10::Device device, int64_t id) const {
    const c10::DeviceIndex index = device.has_index() ? device.index() : current_device(type_);
    TORCH_CHECK(index >= 0 && index < kMaxDevices, "invalid device ordinal ", index);
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(type_, index), id);
  }
  // stream_query / event_query: SUCCESS when done, NOT_READY while pending, anything else raises.
  static bool ready(torchplug_status status) {
    if (status == TORCHPLUG_ERROR_NOT_READY) {
      return false;
    }
    check_runtime(status);
    return true;
  }
  c10::DeviceType type_;
  const torchplug_device_runtime& runtime_;
};

}  // namespace

c10::DeviceIndex current_device(c10::DeviceType type) {
  int32_t index = 0;
  static_cast<void>(host_runtime(type).get_device(&index));  // cannot fail
  return static_cast<c10::DeviceIndex>(index);
}

c10::DeviceIndex exchange_device(c10::DeviceType type, c10::DeviceIndex index) {
  const c10::DeviceIndex previous = current_device(type);
  if (index >= 0) {  // a device without an index means "the current one"
    check_runtime(host_runtime(type).set_device(index));  // range-checked as the runtime's devices
  }
  return previous;
}

int64_t current_stream_id(c10::Device device) {
  TORCH_CHECK(device.index() >= 0 && device.index() < kMaxDevices, "invalid device ordinal ", device.index());
  return t_current_stream[emulated_slot(device.type())][device.index()];
}

void set_current_stream(c10::Device device, int64_t stream_id) {
  check_index(device.type(), device.index());
  t_current_stream[emulated_slot(device.type())][device.index()] = stream_id;
}

void register_guard(c10::DeviceType type) {
  emulated_slot(type);  // rejects device types the runtime does not emulate
  // Lives for the process, as c10 expects of guard implementations.
  static_cast<void>(c10::impl::DeviceGuardImplRegistrar(type, new EmulatedGuard(type)));
}

}  // namespace torchplug::emulation
