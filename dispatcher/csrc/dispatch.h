// The parts of torchplug's dispatcher extension that bindings.cpp exposes to Python.
#pragma once
// pybind11 alone: the bindings pass strings and numbers, and torch/extension.h would triple the build.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace torchplug {
void bind_dtype_split(pybind11::module_& m);
void bind_governed_fallback(pybind11::module_& m);
}  // namespace torchplug
