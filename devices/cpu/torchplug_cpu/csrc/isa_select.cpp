// Run-time ISA dispatch: CPUID (and the OS's XSAVE state, without which the wide registers are
// unusable) decides which kernel tables may run; the best one runs unless set_isa() (driven by
// TORCHPLUG_CPU_ISA in kernels.py) picks another.
#include <c10/util/Exception.h>
#include <cpuid.h>

#include <atomic>

#include "api.h"

namespace torchplug_cpu {
namespace {

struct CpuFeatures {
  bool avx2_fma_f16c = false;
  bool avx512f = false;
  bool avx512_vnni_vbmi = false;  // with BW: what quant_vnni.h needs (quant_avx2_dots.h: avx2_fma_f16c)
};

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool fma = ecx & (1u << 12), osxsave = ecx & (1u << 27), avx = ecx & (1u << 28), f16c = ecx & (1u << 29);
  if (!(osxsave && avx)) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool os_ymm = (xcr0_lo & 0x6) == 0x6;     // SSE + AVX state saved by the OS
  const bool os_zmm = (xcr0_lo & 0xe6) == 0xe6;   // ... + opmask and both halves of zmm0-31
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  const bool avx2 = ebx & (1u << 5), avx512f = ebx & (1u << 16);
  f.avx2_fma_f16c = os_ymm && avx2 && fma && f16c;
  f.avx512f = f.avx2_fma_f16c && os_zmm && avx512f;
  const bool bw = ebx & (1u << 30), vbmi = ecx & (1u << 1), vnni = ecx & (1u << 11);
  f.avx512_vnni_vbmi = f.avx512f && bw && vbmi && vnni;
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures f = detect();
  return f;
}

struct Isa {
  const char* name;
  const char* needs;  // for the error message
  bool (*supported)();
  const IsaKernels& (*kernels)();
};

// The avx512emu test path lives in an extension of its own, compiled only the first time that path
// is selected (kernels.py), so that no one else's build pays for it; it hands over its table here.
std::atomic<const IsaKernels*> g_test_path{nullptr};
const IsaKernels& test_path_kernels() { return *g_test_path.load(std::memory_order_acquire); }

const Isa kIsas[] = {  // best first, but for the last
    {"avx512", "AVX-512F (with AVX2, FMA and F16C)", [] { return features().avx512f; }, &avx512_kernels},
    {"avx2", "AVX2, FMA and F16C", [] { return features().avx2_fma_f16c; }, &avx2_kernels},
    {"scalar", "nothing", [] { return true; }, &scalar_kernels},
    // Last, so never the default: a test path, not a fast one (see vec_avx512emu.h).
    {"avx512emu", "AVX2, FMA and F16C", [] { return features().avx2_fma_f16c; }, &test_path_kernels},
};

const IsaKernels* best() {
  for (const Isa& isa : kIsas)
    if (isa.supported()) return &isa.kernels();
  return &scalar_kernels();
}

std::atomic<const IsaKernels*> g_active{nullptr};

}  // namespace

const IsaKernels& active_kernels() {
  const IsaKernels* k = g_active.load(std::memory_order_acquire);
  if (k == nullptr) {
    const IsaKernels* expected = nullptr;
    g_active.compare_exchange_strong(expected, best());
    k = g_active.load(std::memory_order_acquire);
  }
  return *k;
}

std::vector<std::string> known_isas() {
  std::vector<std::string> names;
  for (const Isa& isa : kIsas) names.emplace_back(isa.name);
  return names;
}

std::vector<std::string> supported_isas() {
  std::vector<std::string> names;
  for (const Isa& isa : kIsas)
    if (isa.supported()) names.emplace_back(isa.name);
  return names;
}

void set_isa(const std::string& name) {
  for (const Isa& isa : kIsas) {
    if (name != isa.name) continue;
    TORCH_CHECK_VALUE(isa.supported(), "torchplug-cpu: TORCHPLUG_CPU_ISA=", name, " needs ", isa.needs,
                      ", which this CPU (or OS) does not provide. It supports: ", c10::Join(", ", supported_isas()),
                      ". Unset TORCHPLUG_CPU_ISA to use the best of them.");
    TORCH_CHECK_VALUE(isa.kernels != &test_path_kernels || g_test_path.load() != nullptr,
                      "torchplug-cpu: the avx512emu test path is not loaded; kernels.select_isa('avx512emu') "
                      "(or TORCHPLUG_CPU_ISA=avx512emu) builds and loads it");
    g_active.store(&isa.kernels(), std::memory_order_release);
    return;
  }
  TORCH_CHECK_VALUE(false, "torchplug-cpu: unknown TORCHPLUG_CPU_ISA=", name, "; expected one of ",
                    c10::Join(", ", known_isas()), " (or unset it to use the best this CPU supports)");
}

std::string current_isa() { return active_kernels().name; }

void register_test_path(uintptr_t table) {
  g_test_path.store(reinterpret_cast<const IsaKernels*>(table), std::memory_order_release);
}

namespace {
// Decode kernels with integer dot products over rounded activations, which replace a table's
// float ones: the avx512 path's where the CPU has AVX512-VNNI and VBMI (their file is compiled for
// both), the avx2 path's; and the setting that allows them.
struct IntegerDots {
  const IsaKernels::QuantTasks* (*avx512vnni)();
  const IsaKernels::QuantTasks* (*avx2)();
  std::atomic<bool> on{true};

  const IsaKernels::QuantTasks* of_active_path() const {
    const IsaKernels* active = &active_kernels();
    if (active == &avx512_kernels() && features().avx512_vnni_vbmi) return avx512vnni();
    if (active == &avx2_kernels()) return avx2();
    return nullptr;
  }
  const IsaKernels::QuantTasks* kernels() const { return on.load(std::memory_order_relaxed) ? of_active_path() : nullptr; }
};

IntegerDots g_int4_int8{&avx512vnni_int4_gemv_int8_dots, &avx2_int4_gemv_int8_dots};
IntegerDots g_int8_int16{&avx512vnni_int8_gemv_int16_dots, &avx2_int8_gemv_int16_dots};
}  // namespace

bool int4_int8_dots_supported() { return g_int4_int8.of_active_path() != nullptr; }
void set_int4_int8_dots(bool on) { g_int4_int8.on.store(on, std::memory_order_relaxed); }
const IsaKernels::QuantTasks* int4_int8_kernels() { return g_int4_int8.kernels(); }
bool int4_int8_dots() { return int4_int8_kernels() != nullptr; }

const IsaKernels::QuantTasks* int4_prefill_kernels() {
  const bool vnni = &active_kernels() == &avx512_kernels() && features().avx512_vnni_vbmi;
  return vnni && g_int4_int8.on.load(std::memory_order_relaxed) ? avx512vnni_int4_prefill_int16() : nullptr;
}
bool int4_int16_prefill() { return int4_prefill_kernels() != nullptr; }

bool int8_int16_dots_supported() { return g_int8_int16.of_active_path() != nullptr; }
void set_int8_int16_dots(bool on) { g_int8_int16.on.store(on, std::memory_order_relaxed); }
const IsaKernels::QuantTasks* int8_int16_kernels() { return g_int8_int16.kernels(); }
bool int8_int16_dots() { return int8_int16_kernels() != nullptr; }

namespace {
std::atomic<int64_t> g_gemv_prefetch_bytes{-1};
}  // namespace

int64_t gemv_prefetch_bytes() { return g_gemv_prefetch_bytes.load(std::memory_order_relaxed); }

void set_gemv_prefetch_bytes(int64_t bytes) { g_gemv_prefetch_bytes.store(bytes, std::memory_order_relaxed); }

int64_t own_prefetch_bytes() { return active_kernels().own_prefetch_bytes; }

namespace {
std::atomic<int> g_gemv_prefetch_level{1};
}  // namespace

int gemv_prefetch_level() { return g_gemv_prefetch_level.load(std::memory_order_relaxed); }

namespace {
std::atomic<int> g_gemv_streams{1};
}  // namespace

int gemv_streams() { return g_gemv_streams.load(std::memory_order_relaxed); }

void set_gemv_streams(int streams) {
  TORCH_CHECK_VALUE(streams == 1 || streams == 2 || streams == 4, "torchplug-cpu: the weight streams are 1, 2 or 4, not ",
                    streams);
  g_gemv_streams.store(streams, std::memory_order_relaxed);
}

void set_gemv_prefetch_level(int level) {
  TORCH_CHECK_VALUE(level == 1 || level == 2, "torchplug-cpu: the prefetch level is 1 (L1) or 2 (L2), not ", level);
  g_gemv_prefetch_level.store(level, std::memory_order_relaxed);
}

}  // namespace torchplug_cpu
