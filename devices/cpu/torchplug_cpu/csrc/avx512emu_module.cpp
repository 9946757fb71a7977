// The avx512emu test path as an extension of its own: kernels.py builds it the first time that path is
// selected, so that no other build compiles it, and hands its kernel table to torchplug_cpu_ext
// (register_test_path). Plain CPython: pybind11 would cost more than the table.
#include <Python.h>

#include "isa.h"

#define TP_CONCAT_(a, b) a##b
#define TP_CONCAT(a, b) TP_CONCAT_(a, b)
#define TP_STRING_(x) #x
#define TP_STRING(x) TP_STRING_(x)

namespace {

PyObject* table(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(const_cast<torchplug_cpu::IsaKernels*>(&torchplug_cpu::avx512emu_kernels()));
}

PyMethodDef kMethods[] = {{"table", table, METH_NOARGS, "the avx512emu kernel table's address"},
                          {nullptr, nullptr, 0, nullptr}};
PyModuleDef kModule = {PyModuleDef_HEAD_INIT, TP_STRING(TORCH_EXTENSION_NAME), nullptr, -1, kMethods};

}  // namespace

// The test path runs its ISA path's own prefetch distance and one weight stream: a distance tuned for a CPU (kernels.py)
// matters on real hardware only, and this extension does not share torchplug_cpu_ext's settings.
int64_t torchplug_cpu::gemv_prefetch_bytes() { return -1; }
int torchplug_cpu::gemv_prefetch_level() { return 1; }
int torchplug_cpu::gemv_streams() { return 1; }

PyMODINIT_FUNC TP_CONCAT(PyInit_, TORCH_EXTENSION_NAME)() { return PyModule_Create(&kModule); }
