// Emulation's device runtime: torchplug's device-runtime contract (device_runtime.h) over host memory,
// one table per emulated device type. It is THE implementation of emulation's device primitives: the
// torch-facing allocator, guard, hooks and copies call these entries, exactly as torchplug's binding
// calls a vendor's table, and Python gets each table's address (runtime_table) to run the contract kit.
//
// Host memory is always accessible and kernels run when they are issued, so: memory comes from the
// emulation block allocator (allocator.cpp: charging, statistics, capacity and OutOfMemoryError), copies
// and memset are plain host operations, streams are numbers (the stream ids torch's guard hands out;
// every stream is always idle), an event completes when it is recorded and keeps the host time of its
// last record, and launch_host calls the kernel directly.
#include "device_types.h"
#include "emulation.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace torchplug::emulation {

namespace {

thread_local std::string t_error;
// The current device of each emulated type on this thread (the contract's set_device/get_device).
thread_local std::array<int32_t, kEmulatedTypes.size()> t_device{};
std::atomic<int64_t> g_next_stream{kFirstCreatedStream};

std::mutex g_pinned_mutex;
std::unordered_set<const void*> g_pinned;  // blocks handed out by host_malloc

struct Event {
  int32_t device;
  bool timing;
  bool recorded;
  std::chrono::steady_clock::time_point recorded_at;
};

torchplug_status fail(torchplug_status status, std::string why) {
  t_error = std::move(why);
  return status;
}

// Runs `body`, turning what it raises into the contract's status and this thread's last error.
template <class Body>
torchplug_status guarded(Body&& body) {
  try {
    body();
    return TORCHPLUG_SUCCESS;
  } catch (const c10::OutOfMemoryError& err) {
    return fail(TORCHPLUG_ERROR_OUT_OF_MEMORY, err.what_without_backtrace());
  } catch (const c10::Error& err) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, err.what_without_backtrace());
  } catch (const std::exception& err) {
    return fail(TORCHPLUG_ERROR_INTERNAL, err.what());
  }
}

// SUCCESS if `index` names a device of `type`, else INVALID_DEVICE with the message real runtimes give.
torchplug_status check_device(c10::DeviceType type, int32_t index) {
  try {
    check_index(type, index);
    return TORCHPLUG_SUCCESS;
  } catch (const c10::Error& err) {
    return fail(TORCHPLUG_ERROR_INVALID_DEVICE, err.what_without_backtrace());
  }
}

const char* last_error() { return t_error.c_str(); }

torchplug_status memcpy_host(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind) {
  if (kind < TORCHPLUG_HOST_TO_DEVICE || kind > TORCHPLUG_DEVICE_TO_DEVICE) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "memcpy: unknown kind " + std::to_string(static_cast<int>(kind)));
  }
  if (nbytes > 0) {
    std::memmove(destination, source, nbytes);
  }
  return TORCHPLUG_SUCCESS;
}

torchplug_status memcpy_async_host(void* destination, const void* source, size_t nbytes, torchplug_memcpy_kind kind,
                                   torchplug_stream /*stream*/) {
  return memcpy_host(destination, source, nbytes, kind);  // done when it returns: every stream is idle
}

torchplug_status memset_host(void* destination, int value, size_t nbytes) {
  if (nbytes > 0) {
    std::memset(destination, value, nbytes);
  }
  return TORCHPLUG_SUCCESS;
}

torchplug_status host_malloc(size_t nbytes, void** pointer) {
  return guarded([&] {
    ChargeTo host(c10::Device(c10::DeviceType::CPU));  // plain host memory, charged to no device
    *pointer = host_allocator()->allocate(nbytes).release_context();
    if (*pointer != nullptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(*pointer);
    }
  });
}

torchplug_status host_free(void* pointer) {
  if (pointer == nullptr) {
    return TORCHPLUG_SUCCESS;
  }
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    if (g_pinned.erase(pointer) == 0) {
      return fail(TORCHPLUG_ERROR_INVALID_VALUE, "host_free: " + c10::str(pointer) + " is not from host_malloc");
    }
  }
  host_allocator()->raw_deallocate(pointer);
  return TORCHPLUG_SUCCESS;
}

torchplug_status stream_destroy(torchplug_stream /*stream*/) { return TORCHPLUG_SUCCESS; }
torchplug_status stream_idle(torchplug_stream /*stream*/) { return TORCHPLUG_SUCCESS; }
torchplug_status stream_wait_event(torchplug_stream /*stream*/, torchplug_event /*event*/) {
  return TORCHPLUG_SUCCESS;  // the event was reached when it was recorded
}

torchplug_status event_destroy(torchplug_event event) {
  delete reinterpret_cast<Event*>(event);
  return TORCHPLUG_SUCCESS;
}

torchplug_status event_record(torchplug_event event, torchplug_stream /*stream*/) {
  if (event == nullptr) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "event_record: no event (NULL)");
  }
  auto* e = reinterpret_cast<Event*>(event);
  e->recorded_at = std::chrono::steady_clock::now();
  e->recorded = true;
  return TORCHPLUG_SUCCESS;
}

torchplug_status event_reached(torchplug_event event) {
  return event == nullptr ? fail(TORCHPLUG_ERROR_INVALID_VALUE, "no event (NULL)") : TORCHPLUG_SUCCESS;
}

torchplug_status event_elapsed_time(float* milliseconds, torchplug_event start, torchplug_event end) {
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  if (a == nullptr || b == nullptr || !a->recorded || !b->recorded) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "Both events must be recorded before calculating elapsed time.");
  }
  if (!a->timing || !b->timing) {
    return fail(TORCHPLUG_ERROR_INVALID_VALUE, "Both events must be created with argument 'enable_timing=True'.");
  }
  *milliseconds = std::chrono::duration<float, std::milli>(b->recorded_at - a->recorded_at).count();
  return TORCHPLUG_SUCCESS;
}

// The entries that depend on the device type, one instantiation per emulated type.
template <int Slot>
struct TypeEntries {
  static constexpr c10::DeviceType kType = kEmulatedTypes[Slot].type;

  static torchplug_status device_count(int32_t* count) {
    *count = is_emulated(kType) ? state(kType).count : 0;
    return TORCHPLUG_SUCCESS;
  }
  static torchplug_status set_device(int32_t device) {
    if (state(kType).count > 0) {  // configured, or registered early (module.cpp)
      if (torchplug_status status = check_device(kType, device)) {
        return status;
      }
    } else if (device < 0 || device >= kMaxDevices) {
      return fail(TORCHPLUG_ERROR_INVALID_DEVICE, "invalid device ordinal " + std::to_string(device));
    }
    t_device[Slot] = device;
    return TORCHPLUG_SUCCESS;
  }
  static torchplug_status get_device(int32_t* device) {
    *device = t_device[Slot];
    return TORCHPLUG_SUCCESS;
  }
  static torchplug_status get_device_properties(int32_t device, torchplug_device_properties* properties) {
    if (torchplug_status status = check_device(kType, device)) {
      return status;
    }
    const TypeState& st = state(kType);
    const DeviceProperties& model = st.properties;
    std::memset(properties, 0, sizeof(*properties));
    const std::string name = st.count > 1 ? model.name + " #" + std::to_string(device) : model.name;
    std::snprintf(properties->name, sizeof(properties->name), "%s", name.c_str());
    properties->total_memory = static_cast<uint64_t>(st.stats[device].capacity.load());
    properties->multi_processor_count = model.multi_processor_count;
    properties->major = model.major;
    properties->minor = model.minor;
    properties->warp_size = model.warp_size;
    return TORCHPLUG_SUCCESS;
  }
  static torchplug_status synchronize(int32_t device) {
    return check_device(kType, device);  // kernels ran when they were issued
  }
  static torchplug_status malloc(int32_t device, size_t nbytes, void** pointer) {
    *pointer = nullptr;
    if (torchplug_status status = check_device(kType, device)) {
      return status;
    }
    if (nbytes == 0) {
      return TORCHPLUG_SUCCESS;
    }
    return guarded([&] { *pointer = device_block(nbytes, c10::Device(kType, static_cast<c10::DeviceIndex>(device))); });
  }
  static torchplug_status free(int32_t device, void* pointer) {
    if (pointer == nullptr) {
      return TORCHPLUG_SUCCESS;
    }
    if (torchplug_status status = check_device(kType, device)) {
      return status;
    }
    return guarded([&] { free_device_block(pointer, c10::Device(kType, static_cast<c10::DeviceIndex>(device))); });
  }
  static torchplug_status stream_create(torchplug_stream* stream, int32_t /*priority*/) {
    *stream = reinterpret_cast<torchplug_stream>(static_cast<uintptr_t>(g_next_stream.fetch_add(1)));
    return TORCHPLUG_SUCCESS;
  }
  static torchplug_status event_create(torchplug_event* event, int32_t enable_timing) {
    *event = reinterpret_cast<torchplug_event>(new Event{t_device[Slot], enable_timing != 0, false, {}});
    return TORCHPLUG_SUCCESS;
  }
  static torchplug_status launch_host(int32_t device, torchplug_stream /*stream*/, torchplug_host_kernel kernel,
                                      void* arguments) {
    if (torchplug_status status = check_device(kType, device)) {
      return status;
    }
    kernel(arguments);  // host memory is always accessible
    return TORCHPLUG_SUCCESS;
  }

  static constexpr torchplug_device_runtime table() {
    torchplug_device_runtime t{};
    t.abi_version = TORCHPLUG_DEVICE_RUNTIME_ABI_VERSION;
    t.struct_size = sizeof(torchplug_device_runtime);
    t.name = kEmulatedTypes[Slot].runtime_name;
    t.last_error = &last_error;
    t.device_count = &device_count;
    t.set_device = &set_device;
    t.get_device = &get_device;
    t.get_device_properties = &get_device_properties;
    t.synchronize = &synchronize;
    t.malloc = &malloc;
    t.free = &free;
    t.memcpy = &memcpy_host;
    t.memcpy_async = &memcpy_async_host;
    t.memset = &memset_host;
    t.host_malloc = &host_malloc;
    t.host_free = &host_free;
    t.stream_create = &stream_create;
    t.stream_destroy = &stream_destroy;
    t.stream_synchronize = &stream_idle;
    t.stream_query = &stream_idle;
    t.stream_wait_event = &stream_wait_event;
    t.event_create = &event_create;
    t.event_destroy = &event_destroy;
    t.event_record = &event_record;
    t.event_query = &event_reached;
    t.event_synchronize = &event_reached;
    t.event_elapsed_time = &event_elapsed_time;
    t.launch_host = &launch_host;
    return t;
  }
};

template <size_t... Slots>
constexpr std::array<torchplug_device_runtime, sizeof...(Slots)> make_tables(std::index_sequence<Slots...>) {
  return {TypeEntries<static_cast<int>(Slots)>::table()...};
}

const std::array<torchplug_device_runtime, kEmulatedTypes.size()> g_tables =
    make_tables(std::make_index_sequence<kEmulatedTypes.size()>());

// The table of each c10::DeviceType, nullptr for types emulation cannot serve: one load on hot paths.
const std::array<const torchplug_device_runtime*, kNumDeviceTypes> g_by_type = [] {
  std::array<const torchplug_device_runtime*, kNumDeviceTypes> by_type{};
  for (size_t slot = 0; slot < kEmulatedTypes.size(); ++slot) {
    by_type[static_cast<size_t>(kEmulatedTypes[slot].type)] = &g_tables[slot];
  }
  return by_type;
}();

}  // namespace

const torchplug_device_runtime& host_runtime(c10::DeviceType type) {
  const torchplug_device_runtime* table = g_by_type[static_cast<size_t>(type)];
  TORCH_CHECK(table != nullptr, "torchplug cannot emulate device type ", type);
  return *table;
}

const torchplug_device_runtime& pinned_runtime() {
  return g_tables[0];  // host_malloc/host_free share one host heap across every type's table
}

void check_runtime(torchplug_status status) {
  if (status == TORCHPLUG_SUCCESS) {
    return;
  }
  // The runtime's own message, unchanged: torch sees the error emulation has always raised.
  TORCH_CHECK_WITH(OutOfMemoryError, status != TORCHPLUG_ERROR_OUT_OF_MEMORY, t_error);
  TORCH_CHECK(false, t_error);
}

bool is_pinned(const void* data) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  return g_pinned.count(data) != 0;
}

}  // namespace torchplug::emulation
