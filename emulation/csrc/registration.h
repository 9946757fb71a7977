// For the files that register kernels: libraries kept for the process, and kernels the coverage
// audit sees. Apart from emulation.h, which stays free of torch/library.h (every unit includes it).
#pragma once

#include "emulation.h"

#include <torch/library.h>

#include <cstdint>

namespace torchplug::emulation {

// A new Library that lives as long as the process: torch drops a Library's registrations when it is
// destroyed, and the emulator's kernels stay registered while the extension is loaded.
torch::Library& kept_library(torch::Library::Kind kind, const char* ns, c10::DispatchKey key, const char* file,
                             uint32_t line);

using BoxedKernel = void (*)(const c10::OperatorHandle&, torch::jit::Stack*);

template <BoxedKernel Kernel>
void noting(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  note_dispatch(op);
  Kernel(op, stack);
}

// `Kernel` as a boxed kernel whose calls the coverage audit sees (run_on_host notes its own calls).
template <BoxedKernel Kernel>
torch::CppFunction noted() {
  return torch::CppFunction::makeFromBoxedFunction<&noting<Kernel>>();
}

}  // namespace torchplug::emulation
