// torch's device guard for the bound device: the current device, streams and events, each a call
// into the runtime. Stream ids: 0 is the runtime's default stream (NULL), n > 0 the n-th created.
#include "binding.h"

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <mutex>
#include <vector>

namespace torchplug::binding {
namespace {

std::mutex streams_mutex;
std::array<std::vector<torchplug_stream>, kMaxDevices> created;  // per device, stream id - 1
thread_local std::array<c10::StreamId, kMaxDevices> current_streams{};

c10::DeviceIndex index_of(c10::Device device) {
  return device.has_index() ? device.index() : static_cast<c10::DeviceIndex>(current_device());
}

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, device), id);
}


struct RuntimeGuard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    if (device.index() != previous.index()) setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return c10::Device(kType, static_cast<c10::DeviceIndex>(current_device())); }
  void setDevice(c10::Device device) const override { set_device(index_of(device)); }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    runtime().set_device(index_of(device));
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    int32_t count = 0;
    return runtime().device_count(&count) == TORCHPLUG_SUCCESS ? static_cast<c10::DeviceIndex>(count) : 0;
  }

  c10::Stream getStream(c10::Device device) const override {
    const c10::DeviceIndex index = index_of(device);
    return make_stream(index, current_streams[index]);
  }
  c10::Stream getDefaultStream(c10::Device device) const override { return make_stream(index_of(device), 0); }
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    const c10::DeviceIndex index = index_of(device);
    torchplug_stream handle = nullptr;
    {
      const DeviceScope scope(index);
      check(runtime().stream_create(&handle, priority), "stream_create");
    }
    std::lock_guard<std::mutex> lock(streams_mutex);
    created[index].push_back(handle);
    return make_stream(index, static_cast<c10::StreamId>(created[index].size()));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool high_priority) const override {
    return getNewStream(device, high_priority ? -1 : 0);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    const c10::Stream previous = make_stream(stream.device_index(), current_streams[stream.device_index()]);
    current_streams[stream.device_index()] = stream.id();
    return previous;
  }
  bool queryStream(const c10::Stream& stream) const override {
    const DeviceScope scope(stream.device_index());
    const torchplug_status status = runtime().stream_query(stream_handle(stream));
    if (status == TORCHPLUG_ERROR_NOT_READY) return false;
    check(status, "stream_query");
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    const DeviceScope scope(stream.device_index());
    check(runtime().stream_synchronize(stream_handle(stream)), "stream_synchronize");
  }
  void synchronizeDevice(c10::DeviceIndex device) const override {
    check(runtime().synchronize(device), "synchronize");
  }

  void record(void** event, const c10::Stream& stream, c10::DeviceIndex device, c10::EventFlag flag) const override {
    TORCH_CHECK(device == -1 || device == stream.device_index(), "torchplug: event on device ", device,
                " recorded on a stream of device ", stream.device_index());
    const DeviceScope scope(stream.device_index());
    if (*event == nullptr) {  // torch.Event(enable_timing=True) asks for BACKEND_DEFAULT, as CUDA does
      torchplug_event created_event = nullptr;
      check(runtime().event_create(&created_event, /*enable_timing=*/flag == c10::EventFlag::BACKEND_DEFAULT ? 1 : 0), "event_create");
      *event = created_event;
    }
    check(runtime().event_record(static_cast<torchplug_event>(*event), stream_handle(stream)), "event_record");
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event != nullptr) {
      const DeviceScope scope(stream.device_index());
      check(runtime().stream_wait_event(stream_handle(stream), static_cast<torchplug_event>(event)), "stream_wait_event");
    }
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    const torchplug_status status = runtime().event_query(static_cast<torchplug_event>(event));
    if (status == TORCHPLUG_ERROR_NOT_READY) return false;
    check(status, "event_query");
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device*/) const noexcept override {
    if (event != nullptr) runtime().event_destroy(static_cast<torchplug_event>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) check(runtime().event_synchronize(static_cast<torchplug_event>(event)), "event_synchronize");
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "torchplug: both events must be recorded before elapsed_time");
    float milliseconds = 0;
    check(runtime().event_elapsed_time(&milliseconds, static_cast<torchplug_event>(start),
                                       static_cast<torchplug_event>(end)),
          "event_elapsed_time");
    return milliseconds;
  }
  void recordDataPtrOnStream(const c10::DataPtr& /*data*/, const c10::Stream& /*stream*/) const override {}
};

}  // namespace

torchplug_stream stream_handle(const c10::Stream& stream) {
  if (stream.id() == 0) return nullptr;
  std::lock_guard<std::mutex> lock(streams_mutex);
  const auto& streams = created[stream.device_index()];
  TORCH_CHECK(stream.id() > 0 && static_cast<size_t>(stream.id()) <= streams.size(), "torchplug: unknown stream id ",
              stream.id(), " on device ", static_cast<int>(stream.device_index()));
  return streams[stream.id() - 1];
}

torchplug_stream current_stream(c10::DeviceIndex device) {
  return stream_handle(make_stream(device, current_streams[device]));
}

void register_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(kType, new RuntimeGuard());
}

}  // namespace torchplug::binding
