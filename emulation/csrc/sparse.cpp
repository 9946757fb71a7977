// Sparse tensors are refused where they move to an emulated device, not where they are used.
//
// Emulated devices hold strided tensors only (docs/emulation.md, 'Other limits'). A sparse
// tensor's move, _to_copy, is dispatched to the target's sparse key (SparseXPU, SparseCsrXPU),
// where torch's composite kernel runs: a COO tensor failed deep inside it (no
// _sparse_coo_tensor_with_dims_and_tensors for SparseXPU), and a compressed one (CSR, CSC, BSR,
// BSC) reached the device, where every later op failed with "Could not run ... 'SparseCsrXPU'
// backend". A kernel on those keys now refuses the move, naming the layout and the device, with
// the way out.
#include "emulation.h"
#include "registration.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/TensorOptions.h>
#include <torch/library.h>


namespace torchplug::emulation {

namespace {

// _to_copy(Tensor self, *, ScalarType? dtype, Layout? layout, Device? device, ...).
void refuse_move(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  auto args = stack->end() - 7;
  const c10::Layout layout = args[2].isNone() ? args[0].toTensor().layout() : args[2].toLayout();
  const c10::Device target = args[3].isNone() ? args[0].toTensor().device() : resolve(args[3].toDevice());
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "aten::_to_copy: a ", layout, " tensor cannot move to ", target,
      ": torchplug's emulated devices hold strided tensors only (docs/emulation.md, 'Other limits'). Keep it "
      "on the CPU, or move a dense copy: x.to_dense().to('", target.type(), "')");
}

}  // namespace

void register_sparse_refusals(c10::DeviceType type) {
  for (const c10::Layout layout : {c10::kSparse, c10::kSparseCsr}) {
    const c10::DispatchKey key = c10::computeDispatchKey(std::nullopt, layout, c10::Device(type));
    kept_library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__)
        .impl("_to_copy", torch::CppFunction::makeFromBoxedFunction<&refuse_move>());
  }
}

}  // namespace torchplug::emulation
