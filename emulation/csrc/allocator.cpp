// Host-memory allocator for emulated devices, with per-device statistics and an optional
// capacity past which allocation raises torch.OutOfMemoryError.
//
// The same blocks serve two allocators:
//  * the device allocator of each emulated type (torch.UntypedStorage(..., device="xpu"), resize);
//  * a wrapper around torch's CPU allocator. While a CPU kernel runs for an emulated device (see
//    ChargeTo in fallback.cpp), what it allocates is charged to that device, so fresh outputs can be
//    handed back as device tensors without a copy. Outside a kernel it is an ordinary CPU block.
// Each block starts with a 64-byte header (size, charged device, graph pool) just before the pointer
// the caller sees, so the context equals the data pointer and raw_allocate keeps working. While a
// graph captures, device allocations on its streams come from its private pool (graphs.cpp).
#include "emulation.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace torchplug::emulation {

namespace {

constexpr size_t kHeaderBytes = 64;  // keeps the caller's pointer 64-byte aligned
constexpr uint64_t kMagic = 0x74706c7567656d75ull;

struct Header {
  uint64_t magic;
  uint64_t nbytes;
  int16_t type;   // charged device type, -1 when the block is plain host memory
  int16_t index;
  bool from_original;  // allocated by the wrapped CPU allocator (else c10::alloc_cpu)
  int64_t pool;        // the graph pool that reserves the block (graphs.cpp), 0 for none
  uint64_t capacity;   // bytes behind the header (a pool block's size class; else nbytes)
};
static_assert(sizeof(Header) <= kHeaderBytes);

c10::Allocator* g_original = nullptr;  // torch's CPU allocator, set once by install_host_allocator
bool g_original_raw = false;           // whether g_original supports raw_allocate/raw_deallocate
thread_local c10::Device t_charged{c10::DeviceType::CPU};

Header* header_of(void* data) {
  return reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  return text;
}

DeviceStats& stats_of(c10::Device device) {
  return state(device.type()).stats[device.index()];
}

StatPool pool_of(int64_t nbytes) {
  return nbytes <= kSmallBlockBytes ? kSmallPool : kLargePool;
}

// torch's device caching allocators (CUDA/HIP, XPU) hand out blocks in multiples of 512 bytes, and
// memory_allocated() counts the blocks: a 4000-byte tensor counts 4096 on a GPU, so it does here.
int64_t block_bytes(int64_t nbytes) {
  constexpr int64_t kBlockRound = 512;
  return (nbytes + kBlockRound - 1) / kBlockRound * kBlockRound;
}

void charge(c10::Device device, int64_t requested) {
  check_index(device.type(), device.index());
  const int64_t nbytes = block_bytes(requested);
  DeviceStats& s = stats_of(device);
  Stat& total = s.bytes[kAllPools];
  const int64_t now = total.current.fetch_add(nbytes) + nbytes;
  const int64_t capacity = s.capacity.load(std::memory_order_relaxed);
  if (capacity > 0 && now > capacity) {
    total.current.fetch_sub(nbytes);
    s.num_ooms.fetch_add(1);
    TORCH_CHECK_WITH(
        OutOfMemoryError, false, "torchplug emulated ", device, " is out of memory: tried to allocate ",
        format_bytes(requested), " with ", format_bytes(now - nbytes), " already allocated, capacity ",
        format_bytes(capacity), " (the emulated model's memory, or TORCHPLUG_EMULATE_MEMORY). Free some tensors, "
        "or raise the capacity with TORCHPLUG_EMULATE_MEMORY.");
  }
  total.note_added(now, nbytes);
  s.blocks[kAllPools].add(1);
  s.bytes[pool_of(nbytes)].add(nbytes);
  s.blocks[pool_of(nbytes)].add(1);
}

void refund(c10::Device device, int64_t requested) {
  const int64_t nbytes = block_bytes(requested);
  DeviceStats& s = stats_of(device);
  for (StatPool pool : {kAllPools, pool_of(nbytes)}) {
    s.bytes[pool].remove(nbytes);
    s.blocks[pool].remove(1);
  }
}

void release_memory(Header* h) {
  if (h->from_original) {
    g_original->raw_deallocate(h);
  } else {
    c10::free_cpu(h);
  }
}

// The deleter of every block. A device block goes back through its runtime's free (host_runtime.cpp),
// a graph pool's block to its pool, a plain host block to the host.
void free_block(void* data) {
  if (data == nullptr) {
    return;
  }
  Header* h = header_of(data);
  if (h->pool != 0) {
    const PoolFree pooled = keep_pool_block(h->pool, data, h->capacity);
    if (pooled == PoolFree::kAlreadyFree) {
      return;  // its graph pool took it back already (a cudagraph-trees checkpoint restore)
    }
    refund(c10::Device(static_cast<c10::DeviceType>(h->type), h->index), static_cast<int64_t>(h->nbytes));
    if (pooled == PoolFree::kRelease) {
      release_memory(h);
    }  // else still reserved: a graph replays into it, or the pool's next allocation reuses it
    return;
  }
  if (h->type < 0) {
    release_memory(h);
    return;
  }
  const auto type = static_cast<c10::DeviceType>(h->type);
  if (host_runtime(type).free(h->index, data) != TORCHPLUG_SUCCESS) {
    TORCH_WARN("torchplug emulation: freeing a ", type, " block failed: ", host_runtime(type).last_error());
  }
}

void* raw_block(size_t capacity, c10::Device charged_to, bool charged, bool& from_original) {
  from_original = g_original_raw;
  try {
    return from_original ? g_original->raw_allocate(capacity + kHeaderBytes) : c10::alloc_cpu(capacity + kHeaderBytes);
  } catch (const c10::Error&) {
    if (!charged) {
      throw;
    }
    refund(charged_to, static_cast<int64_t>(capacity));
    // A GPU out of memory raises OutOfMemoryError; so does a device whose backing host memory ran out.
    TORCH_CHECK_WITH(OutOfMemoryError, false, "torchplug emulated ", charged_to, " is out of memory: the host could "
                     "not allocate ", format_bytes(capacity), " to back it. Free some tensors, or set "
                     "TORCHPLUG_EMULATE_MEMORY below the host's free memory.");
  }
}

// Writes the header of a fresh block at `base`; returns the pointer its caller sees.
void* init_block(void* base, size_t nbytes, c10::Device charged_to, bool from_original) {
  auto* h = static_cast<Header*>(base);
  const bool charged = !charged_to.is_cpu();
  h->magic = kMagic;
  h->nbytes = nbytes;
  h->type = charged ? static_cast<int16_t>(charged_to.type()) : int16_t{-1};
  h->index = charged ? charged_to.index() : int16_t{-1};
  h->from_original = from_original;
  h->pool = 0;
  h->capacity = nbytes;
  return static_cast<char*>(base) + kHeaderBytes;
}

// A block of a graph's private pool: a freed one of the same size class, or a new one it reserves. It
// stays here rather than behind the runtime's malloc: a pool keeps size-class blocks reserved after they
// are freed (a graph replays into them), which the contract's malloc/free cannot express; their
// statistics are the same charge/refund the runtime's malloc/free make.
c10::DataPtr allocate_pool_block(size_t nbytes, c10::Device charged_to, c10::Device tagged, int64_t pool) {
  const size_t capacity = pool_block_capacity(nbytes);
  charge(charged_to, static_cast<int64_t>(nbytes));
  void* data = take_pool_block(pool, capacity);
  if (data == nullptr) {
    bool from_original = false;
    void* base = nullptr;
    try {
      base = raw_block(capacity, charged_to, false, from_original);
    } catch (...) {
      refund(charged_to, static_cast<int64_t>(nbytes));
      note_pool_block(pool, nullptr, capacity, /*allocated=*/false);
      throw;
    }
    data = init_block(base, nbytes, charged_to, from_original);
    header_of(data)->pool = pool;
    header_of(data)->capacity = capacity;
    note_pool_block(pool, data, capacity, /*allocated=*/true);
  }
  header_of(data)->nbytes = nbytes;
  return c10::DataPtr(data, data, &free_block, tagged);
}

class HostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    return allocate_block(nbytes, t_charged, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &free_block;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// A c10::DeviceAllocator, as torch.accelerator's memory functions require of the current
// accelerator's allocator (empty_cache, memory_stats, reset_peak_memory_stats, ...).
class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  explicit DeviceAllocator(c10::DeviceType type) : type_(type) {}
  c10::DataPtr allocate(size_t nbytes) override {
    // Inside a kernel for one of our devices, the kernel's device; else the current device.
    c10::Device device = t_charged.type() == type_ ? t_charged : c10::Device(type_, current_device(type_));
    return allocate_block(nbytes, device, device);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &free_block;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool initialized() override {
    return true;  // it exists only once the runtime is configured
  }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}  // nothing is cached
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}  // kernels run at once

  // The counters torch.cuda.memory_stats() reports (device_module.py): no block is cached, so each
  // allocation is its own segment and active block, and reserved bytes are the allocated ones.
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    check_index(type_, index);
    const DeviceStats& s = stats_of(c10::Device(type_, index));
    c10::CachingDeviceAllocator::DeviceStats out;
    for (int pool = 0; pool < kNumPools; ++pool) {
      const c10::CachingAllocator::Stat blocks = snapshot(s.blocks[pool]), bytes = snapshot(s.bytes[pool]);
      out.allocation[pool] = out.segment[pool] = out.active[pool] = blocks;
      out.allocated_bytes[pool] = out.reserved_bytes[pool] = out.active_bytes[pool] = out.requested_bytes[pool] = bytes;
    }
    out.num_ooms = s.num_ooms.load();
    out.num_device_alloc = s.blocks[kAllPools].allocated.load();
    out.num_device_free = s.blocks[kAllPools].freed.load();
    out.max_split_size = -1;  // blocks are never split: the CUDA allocator's unlimited SIZE_MAX, as int64
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex index) override {
    check_index(type_, index);
    reset_accumulated(c10::Device(type_, index));
  }
  void resetPeakStats(c10::DeviceIndex index) override {
    check_index(type_, index);
    reset_peak(c10::Device(type_, index));
  }

 private:
  static c10::CachingAllocator::Stat snapshot(const Stat& stat) {
    c10::CachingAllocator::Stat out;
    out.current = stat.current.load();
    out.peak = stat.peak.load();
    out.allocated = stat.allocated.load();
    out.freed = stat.freed.load();
    return out;
  }

  c10::DeviceType type_;
};

HostAllocator g_host_allocator;
std::array<std::atomic<DeviceAllocator*>, kNumDeviceTypes> g_device_allocators{};
std::mutex g_install_mutex;

}  // namespace

c10::DataPtr allocate_block(size_t nbytes, c10::Device charged_to, c10::Device tagged) {
  if (nbytes == 0) {
    return c10::DataPtr(nullptr, nullptr, &free_block, tagged);
  }
  if (!charged_to.is_cpu()) {
    if (pool_routing_active()) {
      if (const int64_t pool = route_allocation(charged_to)) {  // a graph capture's allocation
        return allocate_pool_block(nbytes, charged_to, tagged, pool);
      }
    }
    void* data = nullptr;
    // Raises OutOfMemoryError past the capacity, with the runtime's message.
    check_runtime(host_runtime(charged_to.type()).malloc(charged_to.index(), nbytes, &data));
    return c10::DataPtr(data, data, &free_block, tagged);
  }
  bool from_original = false;
  void* base = raw_block(nbytes, charged_to, /*charged=*/false, from_original);
  void* data = init_block(base, nbytes, charged_to, from_original);
  return c10::DataPtr(data, data, &free_block, tagged);
}

void* device_block(size_t nbytes, c10::Device device) {
  charge(device, static_cast<int64_t>(nbytes));  // raises OutOfMemoryError past the capacity
  bool from_original = false;
  void* base = raw_block(nbytes, device, /*charged=*/true, from_original);
  return init_block(base, nbytes, device, from_original);
}

void free_device_block(void* data, c10::Device device) {
  Header* h = header_of(data);
  TORCH_CHECK(h->magic == kMagic && h->pool == 0 && h->type == static_cast<int16_t>(device.type()) &&
                  h->index == device.index(),
              "free(", data, ") on ", device, ": not a block the emulated runtime allocated on that device");
  refund(device, static_cast<int64_t>(h->nbytes));
  release_memory(h);
}

bool adopt_block(c10::DataPtr& data, c10::Device device) {
  if (data.get() == nullptr) {
    data.unsafe_set_device(device);
    return true;
  }
  if (data.get_deleter() != &free_block || data.get_context() != data.get()) {
    return false;
  }
  Header* h = header_of(data.get());
  TORCH_INTERNAL_ASSERT(h->magic == kMagic, "torchplug emulation: corrupted block header");
  const bool same = h->type == static_cast<int16_t>(device.type()) && h->index == device.index();
  if (!same) {
    charge(device, static_cast<int64_t>(h->nbytes));
    if (h->type >= 0) {
      refund(c10::Device(static_cast<c10::DeviceType>(h->type), h->index), static_cast<int64_t>(h->nbytes));
    }
    h->type = static_cast<int16_t>(device.type());
    h->index = device.index();
  }
  data.unsafe_set_device(device);
  return true;
}

void install_host_allocator() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_original != nullptr) {
    return;
  }
  g_original = c10::GetCPUAllocator();
  g_original_raw = g_original->raw_deleter() != nullptr;
  // A high priority so a later default registration cannot silently undo the wrap.
  c10::SetCPUAllocator(&g_host_allocator, /*priority=*/100);
}

c10::Allocator* host_allocator() {
  return &g_host_allocator;
}

c10::Allocator* device_allocator(c10::DeviceType type) {
  auto& slot = g_device_allocators[static_cast<size_t>(type)];
  if (DeviceAllocator* existing = slot.load(std::memory_order_acquire)) {
    return existing;
  }
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (slot.load() == nullptr) {
    auto* created = new DeviceAllocator(type);  // lives for the process, like torch's own allocators
    c10::SetAllocator(type, created, /*priority=*/100);
    slot.store(created, std::memory_order_release);
  }
  return slot.load();
}

void Stat::add(int64_t amount) {
  note_added(current.fetch_add(amount) + amount, amount);
}

void Stat::note_added(int64_t now, int64_t amount) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
  allocated.fetch_add(amount, std::memory_order_relaxed);
}

void Stat::remove(int64_t amount) {
  current.fetch_sub(amount);
  freed.fetch_add(amount, std::memory_order_relaxed);
}

void reset_peak(c10::Device device) {
  DeviceStats& s = stats_of(device);
  for (int pool = 0; pool < kNumPools; ++pool) {
    s.bytes[pool].reset_peak();
    s.blocks[pool].reset_peak();
  }
}

void reset_accumulated(c10::Device device) {
  DeviceStats& s = stats_of(device);
  for (int pool = 0; pool < kNumPools; ++pool) {
    for (Stat* stat : {&s.bytes[pool], &s.blocks[pool]}) {
      stat->allocated.store(0);
      stat->freed.store(0);
    }
  }
  s.num_ooms.store(0);
}

ChargeTo::ChargeTo(c10::Device device) : previous_(t_charged) {
  t_charged = device;
}

ChargeTo::~ChargeTo() {
  t_charged = previous_;
}

void free_block_memory(void* data) {
  release_memory(header_of(data));
}

c10::DeleterFnPtr block_deleter() {
  return &free_block;
}

void charge_block(void* data, bool allocated) {
  Header* h = header_of(data);
  const c10::Device device(static_cast<c10::DeviceType>(h->type), h->index);
  if (allocated) {
    charge(device, static_cast<int64_t>(h->nbytes));
  } else {
    refund(device, static_cast<int64_t>(h->nbytes));
  }
}

void resize_storage_bytes(c10::StorageImpl* impl, size_t new_bytes) {
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  const c10::Device device = impl->device();
  c10::DataPtr block = allocate_block(new_bytes, device, device);
  const size_t keep = std::min(new_bytes, impl->nbytes());
  if (keep > 0) {
    check_runtime(host_runtime(device.type()).memcpy(block.get(), impl->data_ptr().get(), keep, TORCHPLUG_DEVICE_TO_DEVICE));
  }
  impl->set_data_ptr_noswap(std::move(block));
  impl->set_nbytes(new_bytes);
}

}  // namespace torchplug::emulation
