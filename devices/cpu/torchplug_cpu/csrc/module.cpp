// The Python module torchplug_cpu.kernels builds and imports (as `torchplug_cpu_ext`).
#include <torch/extension.h>

#include "api.h"

namespace tc = torchplug_cpu;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "torchplug-cpu kernels: fp16 GEMM family (aten overrides) and the portable LLM ops";
  m.def("known_isas", &tc::known_isas, "ISA paths compiled in, best first");
  m.def("supported_isas", &tc::supported_isas, "ISA paths this CPU and OS can run, best first");
  m.def("set_isa", &tc::set_isa, "force an ISA path: avx512, avx2 or scalar", py::arg("name"));
  m.def("current_isa", &tc::current_isa);
  m.def("install_aten_overrides", &tc::install_aten_overrides,
        "route float16 mm/addmm/bmm/baddbmm (and out=/in-place forms) on CPU to torchplug's GEMM");
  m.def("uninstall_aten_overrides", &tc::uninstall_aten_overrides, "give those ops back to torch's kernels");
  m.def("aten_overrides_installed", &tc::aten_overrides_installed);
  m.def("fp16_gemm_calls", &tc::fp16_gemm_calls, "calls that reached torchplug's fp16 GEMM so far");
  m.def("rms_norm", &tc::rms_norm, py::arg("x"), py::arg("weight"), py::arg("eps"));
  m.def("fused_add_rms_norm_", &tc::fused_add_rms_norm_, "residual += x; x = rms_norm(residual) * weight (in place)",
        py::arg("x"), py::arg("residual"), py::arg("weight"), py::arg("eps"));
  m.def("silu_and_mul", &tc::silu_and_mul, py::arg("x"));
  m.def("rotary_embedding", &tc::rotary_embedding, "neox rotate-half; returns new (q, k)", py::arg("q"), py::arg("k"),
        py::arg("cos"), py::arg("sin"));
}
