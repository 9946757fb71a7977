// DeviceGuardImpl for emulated device types: the current device, streams and events.
//
// Kernels run synchronously on the calling thread, so every stream is always idle and an event
// completes when it is recorded. The API semantics still hold: the current device and stream are
// per thread (as with cudaSetDevice), indices are range-checked, and events recorded with timing
// enabled report the host time between them.
#include "device_types.h"
#include "emulation.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <chrono>

namespace torchplug::emulation {

namespace {

constexpr int kPoolStreams = 32;  // ids 1..32 come from the pool, like CUDA's round-robin pool

thread_local std::array<c10::DeviceIndex, kNumDeviceTypes> t_current_device{};
// Streams are tracked per (emulated type, index).
thread_local std::array<std::array<int64_t, kMaxDevices>, kEmulatedTypes.size()> t_current_stream{};
std::atomic<int64_t> g_next_stream{kPoolStreams + 1};
std::atomic<int64_t> g_pool_cursor{0};

struct Event {
  c10::DeviceIndex device;
  bool timing;
  std::chrono::steady_clock::time_point recorded_at;
};

class EmulatedGuard final : public c10::impl::DeviceGuardImplInterface {
 public:
  explicit EmulatedGuard(c10::DeviceType type) : type_(type) {}

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
    const int limit = state(type_).count > 0 ? state(type_).count : kMaxDevices;
    if (device.index() >= 0 && device.index() < limit) {
      t_current_device[static_cast<size_t>(type_)] = device.index();
    }
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
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return make_stream(device, g_next_stream.fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    c10::Device device = make_stream(stream.device(), 0).device();
    c10::Stream previous = make_stream(device, current_stream_id(device));
    t_current_stream[emulated_slot(type_)][device.index()] = stream.id();
    return previous;
  }
  bool queryStream(const c10::Stream& stream) const override {
    graph_check_stream(stream, "querying");
    return true;  // work ran when it was issued
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    graph_check_stream(stream, "synchronizing");
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    check_index(type_, device_index);
    graph_check_device_sync(c10::Device(type_, device_index));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(), "Event device index ", device_index,
        " does not match recording stream's device index ", stream.device_index(), ".");
    auto* e = static_cast<Event*>(*event);
    if (e == nullptr) {
      // torch.Event(enable_timing=True) asks for the backend default, which times events.
      e = new Event{stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT, {}};
      *event = e;
    }
    e->recorded_at = std::chrono::steady_clock::now();
    graph_note_event_record(e, stream);  // a capturing stream's event completes only on replay
  }
  void block(void* event, const c10::Stream& stream) const override {
    graph_note_event_block(event, stream);  // waiting on a capturing stream joins its capture
  }
  bool queryEvent(void* event) const override {
    graph_check_event(event, type_, "querying");
    return true;
  }
  void synchronizeEvent(void* event) const override {
    graph_check_event(event, type_, "synchronizing");
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    graph_forget_event(event);
    delete static_cast<Event*>(event);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "Both events must be recorded before calculating elapsed time.");
    auto* a = static_cast<Event*>(start);
    auto* b = static_cast<Event*>(end);
    TORCH_CHECK(a->timing && b->timing, "Both events must be created with argument 'enable_timing=True'.");
    return std::chrono::duration<double, std::milli>(b->recorded_at - a->recorded_at).count();
  }

 private:
  // Streams are bookkeeping only, so any index a torch internal asks about gets one; the device
  // module's functions check indices against the device count themselves.
  c10::Stream make_stream(c10::Device device, int64_t id) const {
    const c10::DeviceIndex index = device.has_index() ? device.index() : current_device(type_);
    TORCH_CHECK(index >= 0 && index < kMaxDevices, "invalid device ordinal ", index);
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(type_, index), id);
  }
  c10::DeviceType type_;
};

}  // namespace

c10::DeviceIndex current_device(c10::DeviceType type) {
  return t_current_device[static_cast<size_t>(type)];
}

c10::DeviceIndex exchange_device(c10::DeviceType type, c10::DeviceIndex index) {
  c10::DeviceIndex previous = current_device(type);
  if (index < 0) {  // a device without an index means "the current one"
    return previous;
  }
  if (state(type).count > 0) {  // configured, or registered early (module.cpp)
    check_index(type, index);
  } else {
    TORCH_CHECK(index < kMaxDevices, "invalid device ordinal ", index);
  }
  t_current_device[static_cast<size_t>(type)] = index;
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
