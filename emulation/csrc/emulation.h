// torchplug's emulated device runtime: host memory presented to torch as XPU, CUDA, MPS or
// PrivateUse1 devices. One implementation serves every device type; each type is switched on
// at run time by `configure` (module.cpp) with its device count, capacity and dtypes.
//
// Only c10 headers here, so that the allocator and guard translation units compile in seconds.
#pragma once

// The device-runtime contract, by its place in the package (torchplug/entrypoints/include); build.py puts
// the header's digest in the build flags so that the build cache sees it change.
#include "../../entrypoints/include/torchplug/device_runtime.h"

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Generator;
}  // namespace at

namespace pybind11 {
class module_;
}  // namespace pybind11

namespace c10 {
class WarningHandler;
struct StorageImpl;
class Stream;
class OperatorHandle;
struct IValue;
}  // namespace c10

namespace torchplug::emulation {

constexpr int kMaxDevices = 64;
constexpr int kNumDeviceTypes = static_cast<int>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES);

// One statistic as torch's caching allocator reports it: current value, peak, and the running
// totals of what was added and taken away. Atomics: allocations happen on any thread, including
// autograd's device threads.
struct Stat {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> freed{0};
  void add(int64_t amount);
  void note_added(int64_t now, int64_t amount);  // after `current` went up by `amount` to `now`
  void remove(int64_t amount);
  void reset_peak() { peak.store(current.load()); }
};

// torch.cuda.memory_stats()'s pools: every block, blocks of at most 1 MiB, larger ones.
enum StatPool : int { kAllPools = 0, kSmallPool = 1, kLargePool = 2, kNumPools = 3 };
constexpr int64_t kSmallBlockBytes = int64_t{1} << 20;  // the CUDA caching allocator's kSmallSize

// Counters behind memory_allocated / max_memory_allocated / memory_stats, per pool. Blocks are not
// cached, so each is its own segment and bytes are counted as requested (not rounded up).
struct DeviceStats {
  std::array<Stat, kNumPools> bytes;   // allocated_bytes.<pool>.*
  std::array<Stat, kNumPools> blocks;  // allocation.<pool>.*
  std::atomic<int64_t> num_ooms{0};
  std::atomic<int64_t> capacity{0};  // bytes; 0 means unlimited
};

// What the device reports as its properties (the emulated model's; Python's configure sets them).
struct DeviceProperties {
  std::string name;  // "#<index>" is appended when the type has several devices
  int32_t multi_processor_count = 1;
  int32_t major = 0;
  int32_t minor = 0;
  int32_t warp_size = 1;
};

// Everything the runtime knows about one emulated device type. Written once by `configure`
// before `enabled` is published, then only read (the stats are atomics).
struct TypeState {
  std::atomic<bool> enabled{false};
  int count = 0;
  uint64_t dtype_mask = ~0ull;  // bit s set: ScalarType s is supported on this device
  std::string backend;          // torchplug backend name, e.g. "rocm" for the 'cuda' type
  DeviceProperties properties;
  std::array<DeviceStats, kMaxDevices> stats;
};

// Stream ids: 0 is the default stream, 1..kPoolStreams come from the round-robin pool (as CUDA's), later
// ones from stream_create. The host runtime's stream handles are these ids.
constexpr int kPoolStreams = 32;
constexpr int64_t kFirstCreatedStream = kPoolStreams + 1;

// ---- host_runtime.cpp ------------------------------------------------------------------------
// Emulation's device runtime: one contract table (device_runtime.h) per emulated type, over host memory.
// The torch-facing code below calls its entries for device selection, memory, copies, streams and events.
const torchplug_device_runtime& host_runtime(c10::DeviceType type);
const torchplug_device_runtime& pinned_runtime();  // host_malloc/host_free (one host heap for every type)
// Raises the runtime's last error after a failed call: OutOfMemoryError for TORCHPLUG_ERROR_OUT_OF_MEMORY.
void check_runtime(torchplug_status status);
bool is_pinned(const void* data);  // whether host_malloc handed out `data`

// ---- module.cpp ------------------------------------------------------------------------------
// For hooks torch calls before the first device use (torch.Generator(device=...)): configures
// every emulated type through the Python runtime, when it loaded this build at autoload.
void configure_on_first_use(c10::DeviceType type);

// ---- state.cpp -------------------------------------------------------------------------------
TypeState& state(c10::DeviceType type);
bool is_emulated(c10::DeviceType type);
// The device with its index filled in from the current device, checked against the count:
// an out-of-range index raises the error real runtimes give ("invalid device ordinal").
c10::Device resolve(c10::Device device);
void check_index(c10::DeviceType type, int64_t index);
std::string dtype_name(c10::ScalarType dtype);
bool dtype_allowed(c10::DeviceType type, c10::ScalarType dtype);
// Raises TypeError naming `where` (an op) unless the type's backend declares `dtype`.
void check_dtype(c10::DeviceType type, c10::ScalarType dtype, const std::string& where);

// ---- allocator.cpp ---------------------------------------------------------------------------
// Every block carries a small header naming the device it is charged to, so memory a CPU kernel
// allocates can become device memory later without a copy (see fallback.cpp).
void install_host_allocator();
c10::Allocator* host_allocator();
c10::Allocator* device_allocator(c10::DeviceType type);
c10::DataPtr allocate_block(size_t nbytes, c10::Device charged_to, c10::Device tagged);
// The host runtime's malloc and free (host_runtime.cpp): a block charged to `device` (raises
// OutOfMemoryError past its capacity), and its release with the refund.
void* device_block(size_t nbytes, c10::Device device);
void free_device_block(void* data, c10::Device device);
// Re-charge a block of ours to `device` and tag its DataPtr with it. False if not ours.
bool adopt_block(c10::DataPtr& data, c10::Device device);
void reset_peak(c10::Device device);
void reset_accumulated(c10::Device device);  // the running totals and num_ooms, as torch's allocator does
// Storage.resize_ on an emulated device: a new block holding the old bytes that still fit.
void resize_storage_bytes(c10::StorageImpl* impl, size_t new_bytes);
// Returns a block's memory to the system without touching statistics (a graph pool releasing it).
void free_block_memory(void* data);
c10::DeleterFnPtr block_deleter();  // what frees the blocks of the emulated allocator
void charge_block(void* data, bool allocated);  // statistics only: the block is taken (true) or given back

// The device a CPU kernel's allocations are charged to, for the current thread (CPU: none).
class ChargeTo {
 public:
  explicit ChargeTo(c10::Device device);
  ~ChargeTo();
  ChargeTo(const ChargeTo&) = delete;
  ChargeTo& operator=(const ChargeTo&) = delete;

 private:
  c10::Device previous_;
};

// ---- guard.cpp -------------------------------------------------------------------------------
void register_guard(c10::DeviceType type);
c10::DeviceIndex current_device(c10::DeviceType type);
c10::DeviceIndex exchange_device(c10::DeviceType type, c10::DeviceIndex index);
// (stream id, device index) of the thread's current stream on a device.
int64_t current_stream_id(c10::Device device);
void set_current_stream(c10::Device device, int64_t stream_id);

// ---- fallback.cpp ----------------------------------------------------------------------------
c10::DispatchKey dispatch_key(c10::DeviceType type);
// Runs `op` through its CPU kernel on host aliases of the device tensors (the boxed fallback).
void run_on_host(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);
void register_fallback(c10::DeviceType type);

// ---- native_kernels.cpp ----------------------------------------------------------------------
// Gives every op that has a kernel under the type's dispatch key (a CUDA build's own) the host
// path instead; ops seen before are left alone. Returns how many ops it took over.
int64_t adopt_native_kernels(c10::DeviceType type);
// For libraries that load kernels later (import torchvision after the first device use): a mark in
// the record of defined operators, then the adoption of the kernels of the ops defined since it.
int64_t defined_ops_mark();
int64_t adopt_native_kernels_since(c10::DeviceType type, int64_t mark);
// While alive, torch's "Overriding a previously registered kernel" warnings are dropped.
class QuietOverrides {
 public:
  QuietOverrides();
  ~QuietOverrides();
  QuietOverrides(const QuietOverrides&) = delete;
  QuietOverrides& operator=(const QuietOverrides&) = delete;

 private:
  std::unique_ptr<c10::WarningHandler> handler_;
  c10::WarningHandler* previous_;
};

// ---- composites.cpp --------------------------------------------------------------------------
// Per-op kernels for ops whose composite kernels would win over the fallback, or fail on it.
void register_composite_overrides(c10::DeviceType type);

// ---- cuda_results.cpp ------------------------------------------------------------------------
// Kernels whose results follow the device's own (layouts torch's meta functions give, eval batch
// norm's saved statistics; on cuda, what only CUDA's kernels compute). Called by the above.
void register_device_results(c10::DeviceType type);

// ---- cuda_attention.cpp ----------------------------------------------------------------------
// scaled_dot_product_attention with CUDA's backend choice, and the flash and memory-efficient
// kernels computed with the math path (emulated cuda only).
void register_cuda_attention(c10::DeviceType type);

// ---- dispatched.cpp --------------------------------------------------------------------------
// Each kernel the runtime registers notes its operator while recording is on (coverage audit).
void note_dispatch(const c10::OperatorHandle& op);
void record_dispatches(bool on);
std::vector<std::string> take_dispatched();  // operators first noted since the last call

// ---- sparse.cpp ------------------------------------------------------------------------------
// Moving a sparse tensor to the type's devices raises NotImplementedError naming the layout.
void register_sparse_refusals(c10::DeviceType type);

// ---- hooks.cpp -------------------------------------------------------------------------------
// Claims torch's PrivateUse1 hooks slot (once); false if another library holds it already.
bool register_privateuse1_hooks();
// The emulated type torch reports as its accelerator (autograd streams serve only that one).
void set_accelerator(c10::DeviceType type);
// torch's CUDA hooks become torchplug's (emulated cuda), in place, once; see hooks.cpp.
void swap_cuda_hooks();
// On a CUDA build without a visible GPU: torch's CUDA hooks stop claiming the accelerator slot.
void mute_cuda_hooks();
// Which CUDA hooks torch uses now: "torch", "emulated" or "muted".
std::string cuda_hooks_state();

// ---- graphs.cpp ------------------------------------------------------------------------------
// Graph capture: private memory pools for allocations on capturing streams, and the calls a GPU
// refuses while a stream captures (torch.AcceleratorError with CUDA's error codes).
bool pool_routing_active();  // cheap: whether any capture or pool route exists (allocator fast path)
int64_t route_allocation(c10::Device device);  // the pool key to allocate from, 0 for none; may refuse
size_t pool_block_capacity(size_t nbytes);
void* take_pool_block(int64_t pool, size_t capacity);  // a freed block to reuse, or nullptr
void note_pool_block(int64_t pool, void* data, size_t capacity, bool allocated);
enum class PoolFree { kKept, kRelease, kAlreadyFree };
PoolFree keep_pool_block(int64_t pool, void* data, size_t capacity);  // kRelease: free it for real
void graph_check_host_read(const c10::OperatorHandle& op, const std::vector<c10::IValue>& stack);
void graph_check_device_sync(c10::Device device);
bool graph_capturing(c10::Device device);  // whether the current stream of `device` is capturing
// Raises CUDA's at::cuda::assertNotCapturing error for `attempt` while `device` captures.
void graph_check_generator(c10::Device device, const char* attempt);
void graph_check_stream(const c10::Stream& stream, const char* what);
void graph_check_event(void* event, c10::DeviceType type, const char* what);
void graph_note_event_record(void* event, const c10::Stream& stream);
void graph_note_event_block(void* event, const c10::Stream& stream);
void graph_forget_event(void* event);
void bind_graphs(pybind11::module_& m);

// ---- rng.cpp ---------------------------------------------------------------------------------
void create_generators(c10::DeviceType type, int count);
// The device's default generator and a fresh one (index -1: the current device); both are
// generators of the device whose state lives in a CPU generator, which host_generator returns.
at::Generator& default_generator(c10::Device device);
at::Generator new_generator(c10::Device device);
at::Generator host_generator(const at::Generator& generator);
void* generator_impl(c10::Device device);  // the default generator's CPUGeneratorImpl*, opaque for light headers
void manual_seed(c10::Device device, uint64_t seed);
uint64_t initial_seed(c10::Device device);
uint64_t seed(c10::Device device);
std::string get_rng_state(c10::Device device);
void set_rng_state(c10::Device device, const std::string& state);

}  // namespace torchplug::emulation
