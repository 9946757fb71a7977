// CUDA-graph capture on emulated devices: which streams are capturing, the graphs' private memory
// pools, and the calls a GPU refuses while a stream captures (emulation/graphs.py records the work
// itself and replays it).
//
// * A capture begins on a stream of one device, with a capture mode (global, thread_local, relaxed)
//   and a pool. Streams that wait on an event recorded in a capturing stream join its capture.
// * Pools work like the CUDA caching allocator's private pools: while a capture runs, device
//   allocations made on its streams come from its pool (so do those of a thread routed to a pool,
//   as Inductor's cudagraph trees do for warmup). A freed pool block stays reserved for the pool and
//   is reused by later allocations of the same size class, until no graph uses the pool any more.
//   The memory a graph replays into therefore stays valid whatever happens to the tensors that
//   first owned it, exactly as on a GPU.
// * Refused while capturing, with CUDA's error codes: an allocation outside the pool from a thread
//   the capture mode forbids it (cudaMalloc), synchronizing the device from such a thread,
//   synchronizing or querying a capturing stream, and synchronizing or querying an event recorded
//   in a capture. A refusal invalidates the capture; ending it then fails as on a GPU.
#include "device_types.h"
#include "emulation.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/Stream.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

namespace py = pybind11;

namespace torchplug::emulation {

// A named namespace: the extension is built as one unity translation unit, where the other files'
// anonymous namespaces would share these names.
namespace graph_impl {

constexpr size_t kPoolRounding = 512;  // the CUDA caching allocator's smallest size class

enum class Mode : int64_t { kGlobal = 0, kThreadLocal = 1, kRelaxed = 2 };

// CUDA's error codes for what a capture refuses (cudaError_t values, as torch.AcceleratorError carries them).
enum class Code : int32_t { kUnsupported = 900, kInvalidated = 901, kUnjoined = 904, kCapturedEvent = 907 };

using PoolId = std::pair<int64_t, int64_t>;  // torch's MempoolId_t

struct GraphPool {
  c10::Device device{c10::DeviceType::CPU};
  PoolId id;
  int64_t uses = 0;  // graphs and allocate-to-pool contexts holding it
  int64_t live = 0;  // blocks handed out and not freed yet
  std::unordered_multimap<size_t, void*> free_blocks;  // by capacity
};

struct Capture {
  int64_t id = 0;
  c10::Device device{c10::DeviceType::CPU};
  int64_t origin = 0;           // the stream capture began on
  std::set<int64_t> streams;    // origin and the streams that joined it
  std::set<int64_t> unjoined;   // joined streams the origin has not waited on since
  std::thread::id thread;
  Mode mode = Mode::kGlobal;
  int64_t pool = 0;             // key into g_pools
  std::string error;            // why the capture was invalidated; empty while it is valid
  // Pool blocks allocated when the capture began, and what those freed during it held then: a GPU
  // capture runs nothing, so capture_end puts that back when a later allocation reused the block.
  std::set<uintptr_t> live_at_start;
  std::map<uintptr_t, std::string> held;
};

struct ThreadRoute {
  std::thread::id thread;
  c10::Device device{c10::DeviceType::CPU};
  int64_t pool;
};

struct EventTag {
  int64_t capture;
  int64_t stream;
};

std::mutex g_graph_mutex;
std::map<int64_t, GraphPool> g_pools;
std::map<PoolId, int64_t> g_pool_keys;
struct Block {
  size_t capacity;
  int64_t pool;
  bool allocated;
};
std::map<uintptr_t, Block> g_blocks;  // every block a pool reserves
std::map<int64_t, Capture> g_captures;
std::vector<ThreadRoute> g_routes;
std::unordered_map<void*, EventTag> g_events;
std::atomic<int> g_graph_active{0};  // captures plus thread routes: allocations look only when nonzero
std::atomic<size_t> g_tagged{0};  // g_events.size(), readable without the lock
int64_t g_next_capture = 1;
int64_t g_next_pool = 1;
std::atomic<int64_t> g_graph_uid{1};  // pool ids graphs make for themselves: {uid, 0}
std::atomic<int64_t> g_user_uid{1};   // pool ids from graph_pool_handle(): {0, uid}
thread_local int t_bypass = 0;        // replay: its transient results are not graph allocations

std::string type_name(c10::DeviceType type) {
  return c10::DeviceTypeName(type, /*lower_case=*/true);
}

// CUDA's wording (C10_CUDA_CHECK's; HIP's for the rocm backend, whose codes are the same), then what
// the emulation saw.
std::string error_text(c10::DeviceType type, Code code, const std::string& detail) {
  const char* text = "";
  const char* name = "";
  switch (code) {
    case Code::kUnsupported: text = "operation not permitted when stream is capturing"; name = "StreamCaptureUnsupported"; break;
    case Code::kInvalidated: text = "operation failed due to a previous error during capture"; name = "StreamCaptureInvalidated"; break;
    case Code::kUnjoined: text = "capture sequence contains a fork that was not joined to the primary stream"; name = "StreamCaptureUnjoined"; break;
    case Code::kCapturedEvent: text = "operation not permitted on an event last recorded in a capturing stream"; name = "CapturedEvent"; break;
  }
  const std::string& backend = state(type).backend;
  const bool hip = backend == "rocm";
  std::string prefix;
  if (type == c10::DeviceType::CUDA) {
    prefix = std::string(hip ? "HIP error: " : "CUDA error: ") + text + "\nSearch for `" + (hip ? "hipError" : "cudaError") +
             name + "' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n";
  } else {
    prefix = "XPU graph capture error: " + std::string(text) + " (the CUDA equivalent is cudaError" + name + ")\n";
  }
  const std::string device = type_name(type) + (backend.empty() || backend == type_name(type) ? "" : " (backend '" + backend + "')");
  return prefix + "Reported by torchplug's emulated " + device + " device (graph capture is emulated; a GPU fails the same way): " + detail;
}

[[noreturn]] void refuse(c10::DeviceType type, Code code, const std::string& detail) {
  throw c10::AcceleratorError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, static_cast<int32_t>(code),
                              error_text(type, code, detail));
}

// Callers hold g_graph_mutex. The first refusal is the one capture_end reports.
void invalidate(Capture& capture, const std::string& why) {
  if (capture.error.empty()) {
    capture.error = why;
  }
}

bool forbids(const Capture& capture, std::thread::id self) {
  switch (capture.mode) {
    case Mode::kGlobal: return true;
    case Mode::kThreadLocal: return capture.thread == self;
    case Mode::kRelaxed: return false;
  }
  return false;
}

Capture* capturing(c10::Device device, int64_t stream) {
  for (auto& [id, capture] : g_captures) {
    if (capture.device == device && capture.streams.count(stream)) {
      return &capture;
    }
  }
  return nullptr;
}

// A capture that forbids the calling thread "potentially unsafe" calls, per its mode.
Capture* forbidding(c10::Device device) {
  const std::thread::id self = std::this_thread::get_id();
  for (auto& [id, capture] : g_captures) {
    if (capture.device == device && forbids(capture, self)) {
      return &capture;
    }
  }
  return nullptr;
}

// Refuses an unsafe call (device synchronize, cudaMalloc, cudaFree) the capture mode forbids here.
void check_unsafe(c10::Device device, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  const int64_t stream = current_stream_id(device);
  Capture* capture = capturing(device, stream);
  std::string why;
  if (capture != nullptr) {
    why = what + " while the current stream (id " + std::to_string(stream) + ") is capturing a graph";
  } else if ((capture = forbidding(device)) != nullptr) {
    why = what + " while a graph capture in '" +
          (capture->mode == Mode::kGlobal ? "global" : "thread_local") + "' mode is underway on " +
          device.str() + (capture->thread == std::this_thread::get_id() ? " in this thread" : " in another thread");
  } else {
    return;
  }
  invalidate(*capture, why);
  refuse(device.type(), Code::kUnsupported, why + ". Move it out of the capture.");
}

int64_t pool_acquire(c10::Device device, PoolId id) {
  auto found = g_pool_keys.find(id);
  int64_t key;
  if (found == g_pool_keys.end()) {
    key = g_next_pool++;
    g_pool_keys.emplace(id, key);
    GraphPool& pool = g_pools[key];
    pool.device = device;
    pool.id = id;
  } else {
    key = found->second;
    TORCH_CHECK(g_pools.at(key).device == device, "graph memory pool (", id.first, ", ", id.second, ") belongs to ",
                g_pools.at(key).device, ", not ", device);
  }
  ++g_pools.at(key).uses;
  return key;
}

void erase_if_unused(int64_t key) {
  GraphPool& pool = g_pools.at(key);
  if (pool.uses == 0 && pool.live == 0) {
    g_pool_keys.erase(pool.id);
    g_pools.erase(key);
  }
}

void pool_release(int64_t key) {
  std::vector<void*> released;
  {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    auto found = g_pools.find(key);
    if (found == g_pools.end()) {
      return;
    }
    GraphPool& pool = found->second;
    if (--pool.uses > 0) {
      return;
    }
    for (auto& [capacity, data] : pool.free_blocks) {
      g_blocks.erase(reinterpret_cast<uintptr_t>(data));
      released.push_back(data);
    }
    pool.free_blocks.clear();
    erase_if_unused(key);
  }
  for (void* data : released) {
    free_block_memory(data);  // outside the lock: the allocator may call back for other blocks
  }
}

int64_t pool_key(PoolId id) {
  auto found = g_pool_keys.find(id);
  return found == g_pool_keys.end() ? 0 : found->second;
}

c10::Device device_from(const std::string& key, int64_t index) {
  const c10::DeviceType type = emulated_type(key).type;
  TORCH_CHECK(is_emulated(type), "the ", key, " device type is not emulated in this process");
  check_index(type, index);
  return c10::Device(type, static_cast<c10::DeviceIndex>(index));
}

}  // namespace graph_impl

using namespace graph_impl;

// ---- the allocator's side (allocator.cpp) ----------------------------------------------------
bool pool_routing_active() {
  return g_graph_active.load(std::memory_order_acquire) > 0 && t_bypass == 0;
}

int64_t route_allocation(c10::Device device) {
  const int64_t stream = current_stream_id(device);
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  if (Capture* capture = capturing(device, stream)) {
    return capture->pool;
  }
  const std::thread::id self = std::this_thread::get_id();
  for (const ThreadRoute& route : g_routes) {
    if (route.thread == self && route.device == device) {
      return route.pool;
    }
  }
  if (Capture* capture = forbidding(device)) {
    const std::string why = "a device allocation (cudaMalloc) on stream id " + std::to_string(stream) +
        ", which is not capturing, so the memory would not come from the graph's private pool, while a capture in '" +
        (capture->mode == Mode::kGlobal ? "global" : "thread_local") + "' mode is underway on " + device.str();
    invalidate(*capture, why);
    refuse(device.type(), Code::kUnsupported,
           why + ". Allocate on the capturing stream, or before the capture (capture_error_mode='relaxed' allows it).");
  }
  return 0;
}

size_t pool_block_capacity(size_t nbytes) {
  return (nbytes + kPoolRounding - 1) / kPoolRounding * kPoolRounding;
}

void* take_pool_block(int64_t key, size_t capacity) {
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  GraphPool& pool = g_pools.at(key);
  ++pool.live;
  auto found = pool.free_blocks.find(capacity);
  if (found == pool.free_blocks.end()) {
    return nullptr;
  }
  void* data = found->second;
  pool.free_blocks.erase(found);
  g_blocks.at(reinterpret_cast<uintptr_t>(data)).allocated = true;
  return data;
}

void note_pool_block(int64_t key, void* data, size_t capacity, bool allocated) {
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  if (allocated) {
    g_blocks[reinterpret_cast<uintptr_t>(data)] = {capacity, key, true};
    return;
  }
  auto found = g_pools.find(key);  // the allocation failed: undo take_pool_block's count
  if (found != g_pools.end()) {
    --found->second.live;
  }
}

PoolFree keep_pool_block(int64_t key, void* data, size_t capacity) {
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  auto block = g_blocks.find(reinterpret_cast<uintptr_t>(data));
  if (block != g_blocks.end() && !block->second.allocated) {
    return PoolFree::kAlreadyFree;
  }
  auto found = g_pools.find(key);
  if (found != g_pools.end()) {
    GraphPool& pool = found->second;
    --pool.live;
    if (pool.uses > 0 && block != g_blocks.end()) {
      const uintptr_t ptr = reinterpret_cast<uintptr_t>(data);
      for (auto& [id, capture] : g_captures) {
        if (capture.pool == key && capture.live_at_start.count(ptr) && !capture.held.count(ptr)) {
          std::string saved(capacity, '\0');  // what the block holds now, read through its runtime
          check_runtime(host_runtime(capture.device.type()).memcpy(saved.data(), data, capacity, TORCHPLUG_DEVICE_TO_HOST));
          capture.held.emplace(ptr, std::move(saved));
        }
      }
      pool.free_blocks.emplace(capacity, data);
      block->second.allocated = false;
      return PoolFree::kKept;
    }
    erase_if_unused(key);
  }
  if (block != g_blocks.end()) {
    g_blocks.erase(block);
  }
  return PoolFree::kRelease;
}

// ---- the fallback's side (fallback.cpp) ------------------------------------------------------
// graph_capture.py refuses host reads on a capturing stream with a precise message; this catches
// those made where torch switches dispatch modes off (printing a tensor does).
void graph_check_host_read(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  static const c10::OperatorHandle local_scalar =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_local_scalar_dense", "");
  if (op != local_scalar || stack.empty() || !stack.back().isTensor()) {
    return;
  }
  const c10::Device device = stack.back().toTensor().device();
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  if (Capture* capture = capturing(device, current_stream_id(device))) {
    const std::string why = "aten::_local_scalar_dense reads a device value on the host (.item(), printing a "
                            "tensor, ...), so it waits for the capturing stream, which a capture forbids";
    invalidate(*capture, why);
    refuse(device.type(), Code::kUnsupported, why + ". Read it after a replay.");
  }
}

bool graph_capturing(c10::Device device) {
  if (g_graph_active.load(std::memory_order_acquire) == 0 || t_bypass > 0 || !device.has_index()) {
    return false;
  }
  const int64_t stream = current_stream_id(device);
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  return capturing(device, stream) != nullptr;
}

void graph_check_generator(c10::Device device, const char* attempt) {
  TORCH_CHECK(!graph_capturing(device), attempt, " during CUDA graph capture. If you need this call to be captured, "
              "please file an issue. Current cudaStreamCaptureStatus: cudaStreamCaptureStatusActive (torchplug's "
              "emulated ", device, " is capturing a graph on the current stream)");
}

// ---- the device guard's side (guard.cpp) -----------------------------------------------------
void graph_check_device_sync(c10::Device device) {
  if (g_graph_active.load(std::memory_order_acquire) > 0) {
    check_unsafe(device, "synchronizing the device (torch." + type_name(device.type()) + ".synchronize())");
  }
}

void graph_check_stream(const c10::Stream& stream, const char* what) {
  if (g_graph_active.load(std::memory_order_acquire) == 0) {
    return;
  }
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  if (Capture* capture = capturing(stream.device(), stream.id())) {
    const std::string why = std::string(what) + " stream id " + std::to_string(stream.id()) + " on " +
                            stream.device().str() + ", which is capturing a graph";
    invalidate(*capture, why);
    refuse(stream.device_type(), Code::kUnsupported, why + ". Move it out of the capture.");
  }
}

namespace {
// The capture still running that `event` was last recorded in, and the stream it was recorded on.
std::pair<Capture*, int64_t> capture_of_event(void* event) {
  auto tag = g_events.find(event);
  if (tag == g_events.end()) {
    return {nullptr, 0};
  }
  auto capture = g_captures.find(tag->second.capture);
  return {capture == g_captures.end() ? nullptr : &capture->second, tag->second.stream};
}
}  // namespace

void graph_check_event(void* event, c10::DeviceType type, const char* what) {
  if (g_graph_active.load(std::memory_order_acquire) == 0) {
    return;
  }
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  Capture* capture = capture_of_event(event).first;
  if (capture == nullptr) {
    return;
  }
  const std::string why = std::string(what) + " an event recorded while its stream was capturing a graph";
  invalidate(*capture, why);
  refuse(type, Code::kCapturedEvent, why + ": the event only completes when the graph is replayed.");
}

void graph_note_event_record(void* event, const c10::Stream& stream) {
  if (g_graph_active.load(std::memory_order_acquire) == 0 && g_tagged.load() == 0) {
    return;
  }
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  if (Capture* capture = capturing(stream.device(), stream.id())) {
    g_events[event] = {capture->id, stream.id()};
  } else {
    g_events.erase(event);
  }
  g_tagged.store(g_events.size());
}

void graph_note_event_block(void* event, const c10::Stream& stream) {
  if (g_graph_active.load(std::memory_order_acquire) == 0) {
    return;
  }
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  auto [capture, recorded_on] = capture_of_event(event);
  if (capture == nullptr || capture->device != stream.device()) {
    return;
  }
  if (capture->streams.insert(stream.id()).second) {
    capture->unjoined.insert(stream.id());  // a fork: this stream now captures too
  } else if (stream.id() == capture->origin) {
    capture->unjoined.erase(recorded_on);  // the origin waited on the forked stream: joined
  }
}

void graph_forget_event(void* event) {
  if (g_tagged.load() == 0) {
    return;
  }
  std::lock_guard<std::mutex> lock(g_graph_mutex);
  g_events.erase(event);
  g_tagged.store(g_events.size());
}

// ---- Python (emulation/graphs.py) -------------------------------------------------------------
void bind_graphs(py::module_& m) {
  // torch.AcceleratorError with CUDA's error code, as torch's own bindings raise it.
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) {
        std::rethrow_exception(error);
      }
    } catch (const c10::AcceleratorError& e) {
      py::object type = py::module_::import("torch").attr("AcceleratorError");
      py::object exc = type(e.what_without_backtrace());
      exc.attr("error_code") = e.get_error_code();
      PyErr_SetObject(type.ptr(), exc.ptr());
    }
  });
  m.def("graph_pool_handle", []() { return PoolId{0, g_user_uid.fetch_add(1)}; });
  m.def("graph_new_pool_id", []() { return PoolId{g_graph_uid.fetch_add(1), 0}; });
  m.def("graph_capture_begin", [](const std::string& key, int64_t index, int64_t stream, int64_t mode, PoolId pool) {
    const c10::Device device = device_from(key, index);
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    TORCH_CHECK(capturing(device, stream) == nullptr, "stream id ", stream, " on ", device, " is already capturing a graph");
    Capture capture;
    capture.device = device;
    capture.origin = stream;
    capture.streams = {stream};
    capture.thread = std::this_thread::get_id();
    capture.mode = static_cast<Mode>(mode);
    capture.pool = pool_acquire(device, pool);
    for (const auto& [ptr, block] : g_blocks) {
      if (block.pool == capture.pool && block.allocated) {
        capture.live_at_start.insert(ptr);
      }
    }
    const int64_t id = g_next_capture++;
    capture.id = id;
    g_captures.emplace(id, std::move(capture));
    g_graph_active.fetch_add(1);
    return id;
  });
  // Ends a capture; returns (CUDA error code, message) when it was invalidated or left a fork unjoined, else (0, "").
  m.def("graph_capture_end", [](int64_t id) {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    auto found = g_captures.find(id);
    TORCH_CHECK(found != g_captures.end(), "capture_end() called before capture_begin().");
    Capture capture = std::move(found->second);
    g_captures.erase(found);
    g_graph_active.fetch_sub(1);
    const torchplug_device_runtime& runtime = host_runtime(capture.device.type());
    for (const auto& [ptr, bytes] : capture.held) {  // the device memory the capture held, restored
      check_runtime(runtime.memcpy(reinterpret_cast<void*>(ptr), bytes.data(), bytes.size(), TORCHPLUG_HOST_TO_DEVICE));
    }
    for (auto it = g_events.begin(); it != g_events.end();) {
      it = it->second.capture == id ? g_events.erase(it) : std::next(it);
    }
    g_tagged.store(g_events.size());
    const c10::DeviceType type = capture.device.type();
    if (!capture.error.empty()) {
      return std::pair<int32_t, std::string>{
          static_cast<int32_t>(Code::kInvalidated),
          error_text(type, Code::kInvalidated, "the capture was invalidated by " + capture.error + ".")};
    }
    if (!capture.unjoined.empty()) {
      return std::pair<int32_t, std::string>{
          static_cast<int32_t>(Code::kUnjoined),
          error_text(type, Code::kUnjoined,
                     "stream id " + std::to_string(*capture.unjoined.begin()) +
                         " joined the capture (it waited on the capturing stream) but the capturing stream never "
                         "waited on it again. Make the capturing stream wait for it (wait_stream) before the capture ends.")};
    }
    return std::pair<int32_t, std::string>{0, ""};
  });
  // Invalidates the capture and raises what a GPU raises (for refusals graphs.py detects itself).
  m.def("graph_refuse", [](int64_t id, int64_t code, const std::string& why, const std::string& hint) {
    c10::DeviceType type = c10::DeviceType::CUDA;
    {
      std::lock_guard<std::mutex> lock(g_graph_mutex);
      auto found = g_captures.find(id);
      if (found != g_captures.end()) {
        invalidate(found->second, why);
        type = found->second.device.type();
      }
    }
    refuse(type, static_cast<Code>(code), why + ". " + hint);
  });
  // The capture the calling thread's current stream on the device belongs to, and its error; (0, "") if none.
  m.def("graph_current_capture", [](const std::string& key, int64_t index) {
    if (g_graph_active.load(std::memory_order_acquire) == 0) {
      return std::pair<int64_t, std::string>{0, ""};
    }
    const c10::Device device = device_from(key, index);
    const int64_t stream = current_stream_id(device);
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    if (Capture* capture = capturing(device, stream)) {
      return std::pair<int64_t, std::string>{capture->id, capture->error};
    }
    return std::pair<int64_t, std::string>{0, ""};
  });
  m.def("graph_any_capture", []() { return g_graph_active.load() > 0; });
  m.def("graph_check_unsafe", [](const std::string& key, int64_t index, const std::string& what) {
    if (g_graph_active.load(std::memory_order_acquire) > 0) {
      check_unsafe(device_from(key, index), what);
    }
  });
  m.def("graph_pool_retain", [](const std::string& key, int64_t index, PoolId pool) {
    const c10::Device device = device_from(key, index);
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    pool_acquire(device, pool);
  });
  m.def("graph_pool_release", [](PoolId pool) {
    int64_t key;
    {
      std::lock_guard<std::mutex> lock(g_graph_mutex);
      key = pool_key(pool);
    }
    if (key != 0) {
      pool_release(key);
    }
  });
  // The pool whose block holds `ptr` (an address inside it), or None.
  m.def("graph_pointer_pool", [](uintptr_t ptr) -> std::optional<PoolId> {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    auto next = g_blocks.upper_bound(ptr);
    if (next == g_blocks.begin()) {
      return std::nullopt;
    }
    auto block = std::prev(next);
    if (ptr >= block->first + block->second.capacity) {
      return std::nullopt;
    }
    auto pool = g_pools.find(block->second.pool);
    return pool == g_pools.end() ? std::nullopt : std::optional<PoolId>(pool->second.id);
  });
  // (blocks in use, bytes kept free for reuse) of a pool, or None once it is gone.
  m.def("graph_pool_state", [](PoolId pool) -> std::optional<std::pair<int64_t, int64_t>> {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    const int64_t key = pool_key(pool);
    if (key == 0) {
      return std::nullopt;
    }
    const GraphPool& p = g_pools.at(key);
    int64_t free_bytes = 0;
    for (const auto& [capacity, data] : p.free_blocks) {
      free_bytes += static_cast<int64_t>(capacity);
    }
    return std::pair<int64_t, int64_t>{p.live, free_bytes};
  });
  // Inductor's cudagraph trees: the calling thread's allocations on the device go to the pool.
  m.def("graph_begin_thread_pool", [](const std::string& key, int64_t index, PoolId pool) {
    const c10::Device device = device_from(key, index);
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    g_routes.push_back({std::this_thread::get_id(), device, pool_acquire(device, pool)});
    g_graph_active.fetch_add(1);
  });
  m.def("graph_end_thread_pool", [](const std::string& key, int64_t index, PoolId pool) {
    const c10::Device device = device_from(key, index);
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    const int64_t pkey = pool_key(pool);
    for (auto it = g_routes.begin(); it != g_routes.end(); ++it) {
      if (it->pool == pkey && it->device == device && it->thread == std::this_thread::get_id()) {
        g_routes.erase(it);
        g_graph_active.fetch_sub(1);
        return;
      }
    }
  });
  // The data pointer of a storage held by a weak reference (torch's StorageWeakRef.cdata), 0 once it is freed.
  m.def("graph_storage_data", [](uintptr_t weak) -> uintptr_t {
    auto* impl = reinterpret_cast<c10::StorageImpl*>(weak);
    if (c10::raw::weak_intrusive_ptr::use_count(impl) == 0) {
      return 0;
    }
    return reinterpret_cast<uintptr_t>(impl->data_ptr().get());
  });
  // ---- what Inductor's cudagraph trees ask of the CUDA caching allocator (graph_trees.py) ----
  // A pool's state: the blocks allocated in it now.
  m.def("graph_checkpoint", [](PoolId pool) {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    const int64_t key = pool_key(pool);
    TORCH_CHECK(key != 0, "graph memory pool (", pool.first, ", ", pool.second, ") does not exist");
    std::vector<uintptr_t> allocated;
    for (const auto& [ptr, block] : g_blocks) {
      if (block.pool == key && block.allocated) {
        allocated.push_back(ptr);
      }
    }
    return std::make_pair(pool, allocated);
  });
  // Sets the pool back to a checkpoint: blocks allocated since are freed into the pool, blocks it
  // had allocated are taken again and handed to the live storages that point at them (their
  // deleters give the block back when they die); `stale` storages lose their deleters.
  m.def("graph_set_checkpoint", [](std::pair<PoolId, std::vector<uintptr_t>> state, const std::vector<uintptr_t>& stale,
                                   const std::vector<uintptr_t>& add_deleters) {
    std::set<uintptr_t> freed;
    std::set<uintptr_t> taken;
    c10::Device device(c10::DeviceType::CPU);
    {
      std::lock_guard<std::mutex> lock(g_graph_mutex);
      const int64_t key = pool_key(state.first);
      TORCH_CHECK(key != 0, "graph memory pool (", state.first.first, ", ", state.first.second, ") does not exist");
      GraphPool& pool = g_pools.at(key);
      device = pool.device;
      const std::set<uintptr_t> wanted(state.second.begin(), state.second.end());
      for (auto& [ptr, block] : g_blocks) {
        if (block.pool != key || block.allocated == (wanted.count(ptr) > 0)) {
          continue;
        }
        void* data = reinterpret_cast<void*>(ptr);
        if (block.allocated) {
          block.allocated = false;
          --pool.live;
          pool.free_blocks.emplace(block.capacity, data);
          charge_block(data, false);
          freed.insert(ptr);
        } else {
          for (auto it = pool.free_blocks.begin(); it != pool.free_blocks.end(); ++it) {
            if (it->second == data) {
              pool.free_blocks.erase(it);
              break;
            }
          }
          block.allocated = true;
          ++pool.live;
          charge_block(data, true);
          taken.insert(ptr);
        }
      }
    }
    for (uintptr_t cdata : stale) {
      auto* impl = reinterpret_cast<c10::StorageImpl*>(cdata);
      if (freed.count(reinterpret_cast<uintptr_t>(impl->data_ptr().get()))) {
        static_cast<void>(impl->mutable_data_ptr().compare_exchange_deleter(block_deleter(), c10::detail::deleteNothing));
      }
    }
    for (uintptr_t cdata : add_deleters) {
      auto* impl = reinterpret_cast<c10::StorageImpl*>(cdata);
      void* data = impl->data_ptr().get();
      if (taken.erase(reinterpret_cast<uintptr_t>(data))) {
        impl->set_data_ptr_noswap(c10::DataPtr(data, data, block_deleter(), device));
      }
    }
    for (uintptr_t ptr : taken) {  // checkpointed blocks no live storage points at: free again
      block_deleter()(reinterpret_cast<void*>(ptr));
    }
  });
  m.def("graph_raw_delete", [](uintptr_t ptr) { block_deleter()(reinterpret_cast<void*>(ptr)); });
  // Whether the pool's allocated blocks are exactly `ptrs` (with `subset`: some of them).
  m.def("graph_pool_live_equals", [](PoolId pool, const std::set<uintptr_t>& ptrs, bool subset) {
    std::lock_guard<std::mutex> lock(g_graph_mutex);
    const int64_t key = pool_key(pool);
    std::set<uintptr_t> allocated;
    for (const auto& [ptr, block] : g_blocks) {
      if (block.pool == key && block.allocated) {
        allocated.insert(ptr);
      }
    }
    return subset ? std::includes(ptrs.begin(), ptrs.end(), allocated.begin(), allocated.end()) : allocated == ptrs;
  });
  m.def("graph_has_block_deleter", [](uintptr_t cdata) {
    return reinterpret_cast<c10::StorageImpl*>(cdata)->data_ptr().get_deleter() == block_deleter();
  });
  m.def("graph_free_and_remove_deleter", [](uintptr_t cdata) {
    auto* impl = reinterpret_cast<c10::StorageImpl*>(cdata);
    void* data = impl->data_ptr().get();
    TORCH_CHECK(impl->mutable_data_ptr().compare_exchange_deleter(block_deleter(), c10::detail::deleteNothing),
                "Expected standard deleter");
    block_deleter()(data);
  });
  // Later use of the tensor (its TensorImpl*) or storage (StorageImpl*) raises `message`.
  m.def("graph_poison_tensor", [](uintptr_t impl, const std::string& message) {
    reinterpret_cast<c10::TensorImpl*>(impl)->release_storage_and_set_meta_custom_data_ptr_error_msg_(message);
  });
  m.def("graph_poison_storage", [](uintptr_t impl, const std::string& message) {
    reinterpret_cast<c10::StorageImpl*>(impl)->release_data_and_set_meta_custom_data_ptr_error_msg_(message);
  });
  // While replaying, results computed on the way are not graph allocations and nothing is refused.
  m.def("graph_bypass", [](bool on) { t_bypass += on ? 1 : -1; });
}

}  // namespace torchplug::emulation
