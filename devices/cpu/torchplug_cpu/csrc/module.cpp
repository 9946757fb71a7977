// The Python module torchplug_cpu.kernels builds and imports (as `torchplug_cpu_ext`).
// pybind11 alone: the module passes strings and numbers (torch/extension.h would double the build).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "api.h"

namespace py = pybind11;
namespace tc = torchplug_cpu;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "torchplug-cpu kernels: ISA selection and counters; the kernels are the torchplug_cpu:: ops";
  m.def("known_isas", &tc::known_isas, "ISA paths compiled in, best first");
  m.def("supported_isas", &tc::supported_isas, "ISA paths this CPU and OS can run, best first");
  m.def("set_isa", &tc::set_isa, "force an ISA path: avx512, avx2, scalar or avx512emu (once registered)", py::arg("name"));
  m.def("current_isa", &tc::current_isa);
  m.def("register_test_path", &tc::register_test_path, "the avx512emu path's kernel table, by address",
        py::arg("table"));
  m.def("int4_int8_dots_supported", &tc::int4_int8_dots_supported,
        "whether the active ISA path can run int4 decode rows with int8 activations on this CPU "
        "(avx512 with AVX512-VNNI and VBMI, or avx2)");
  m.def("set_int4_int8_dots", &tc::set_int4_int8_dots, "allow (True) or forbid int4 decode rows with int8 activations",
        py::arg("on"));
  m.def("int4_int8_dots", &tc::int4_int8_dots, "whether int4 decode rows run with int8 activations now");
  m.def("int4_int16_prefill", &tc::int4_int16_prefill,
        "whether int4 prefill (more than 16 rows) runs with int16 activations now");
  m.def("int8_int16_dots_supported", &tc::int8_int16_dots_supported,
        "whether the active ISA path can run int8 decode rows with int16 activations on this CPU "
        "(avx512 with AVX512-VNNI and VBMI, or avx2)");
  m.def("set_int8_int16_dots", &tc::set_int8_int16_dots,
        "allow (True) or forbid int8 decode rows with int16 activations", py::arg("on"));
  m.def("int8_int16_dots", &tc::int8_int16_dots, "whether int8 decode rows run with int16 activations now");
  m.def("set_gemv_prefetch_bytes", &tc::set_gemv_prefetch_bytes,
        "how far ahead the skinny products prefetch their weights, in bytes (negative: the ISA path's own)",
        py::arg("bytes"));
  m.def("gemv_prefetch_bytes", &tc::gemv_prefetch_bytes,
        "the skinny products' prefetch distance set (negative: the path's own)");
  m.def("set_gemv_prefetch_level", &tc::set_gemv_prefetch_level,
        "the cache level the skinny products' prefetches fill: 1 (L1, prefetcht0) or 2 (L2, prefetcht1)",
        py::arg("level"));
  m.def("gemv_prefetch_level", &tc::gemv_prefetch_level, "the cache level the skinny products' prefetches fill");
  m.def("set_gemv_streams", &tc::set_gemv_streams,
        "how many weight streams a skinny product's task reads at once: 1, 2 or 4", py::arg("streams"));
  m.def("gemv_streams", &tc::gemv_streams, "how many weight streams a skinny product's task reads at once");
  m.def("own_prefetch_bytes", &tc::own_prefetch_bytes,
        "the active ISA path's own prefetch distance in bytes, which runs while none is set");
  m.def("fp16_gemm_calls", &tc::fp16_gemm_calls, "calls that reached torchplug's fp16 GEMM so far");
  m.def("fp32_gemm_calls", &tc::fp32_gemm_calls, "float32 GEMM calls routed to oneDNN so far");
  m.def("set_fp32_route_skinny", &tc::set_fp32_route_skinny, "route only skinny float32 F.linear products to oneDNN",
        py::arg("skinny"));
  m.def("set_fp16_route_onednn", &tc::set_fp16_route_onednn,
        "send fp16 products of more than a few rows and columns to torch's (oneDNN) kernel", py::arg("onednn"));
  m.def("cpu_vendor", &tc::cpu_vendor, "CPUID vendor string");
  m.def("cpu_model", &tc::cpu_model, "CPUID display family and model, and the brand string");
  m.def("argmax_calls", &tc::argmax_calls, "calls that reached torchplug's argmax kernel so far");
  m.def("quant_mm_calls", &tc::quant_mm_calls, "calls that reached torchplug's int8 / int4 weight-only kernels so far");
  m.def("fused_rms_norm_calls", &tc::fused_rms_norm_calls, "calls that reached torchplug's _fused_rms_norm kernel so far");
}
