// The parts of torchplug's dispatcher extension that bindings.cpp exposes to Python.
#pragma once
#include <torch/extension.h>

namespace torchplug {
void bind_dtype_split(pybind11::module_& m);
void bind_governed_fallback(pybind11::module_& m);
}  // namespace torchplug
