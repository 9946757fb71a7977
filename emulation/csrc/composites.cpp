// Per-op kernels on the emulated keys for ops the boxed fallback would never see, or not in time.
//
// The dispatcher prefers an op's composite kernel over a backend fallback. That is right for ops
// that merely decompose into other ops, but these need a kernel of their own:
//  * composites that call a CPU-only DispatchStub with the tensors' device type, or pick an
//    implementation by device type (copy_, convolution): they run on the host path instead;
//  * ops that have a CPU kernel besides their composite one (e.g. every structured op, whose
//    composite wrapper allocates through the dispatcher and calls the out= variant): routing them
//    to the host path runs exactly the CPU kernel, in one trip instead of two;
//  * scaled_dot_product_attention, an implicit composite that asks a DispatchStub (not
//    overridable for XPU in a CPU build) for its backend: it takes the math implementation (on
//    emulated cuda, CUDA's choice among its kernels: cuda_attention.cpp);
//  * native_dropout, whose CPU kernel samples from the CPU's default generator internally: it is
//    rebuilt from device ops, so it samples from the device's generator (torch.xpu.manual_seed);
//  * native_group_norm_backward, which torch's autograd formula calls with a non-contiguous
//    gradient on XPU only (real XPU kernels accept one, the CPU kernel does not): made contiguous;
//    without a weight it gets one of ones (the CPU kernel fails to give the bias gradient then);
//  * _copy_from and _copy_from_and_resize, which have no CPU kernel but which torch's copying CPU
//    fallback (at::native::cpu_fallback) uses to write results back to a device;
//  * mm, bmm, addmm and baddbmm with out_dtype, which only CUDA builds implement: widened inputs;
//  * _use_cudnn_ctc_loss and _use_miopen_ctc_loss, which ctc_loss asks on 'cuda' and which only
//    CUDA builds implement: false;
//  * _softmax and _log_softmax with half_to_float, a CUDA-only path that softmax(x, dtype=float32)
//    takes for float16 input on 'cuda' (autocast's cross_entropy too), and their backward: widened;
//  * _to_copy with non_blocking=True to the CPU, which asks torch's accelerator for pinned memory,
//    when there may be none (emulated 'cuda'): copies run synchronously anyway, so it is dropped.
#include "device_types.h"
#include "emulation.h"
#include "registration.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

#include <vector>

namespace torchplug::emulation {

namespace {

constexpr const char* kHostPathOps[] = {
    "copy_",                 // copy_stub(device_type) has no kernel for the emulated types
    "convolution",           // would select convolution_overrideable for an unknown backend
    "convolution_backward",  // same
    // CompositeExplicitAutograd kernels that call a DispatchStub with the tensors' device type
    // (an internal assert for any device without one). Found by running every OpInfo sample, its
    // out= and in-place variants and its backward on each emulated type; the test
    // test_emulation_device_generic.py::test_dispatch_stub_composites_run keeps the list honest.
    "conj_physical_",  // also reached by svd(out=...) for complex inputs
    "mode.values",
    // Found by tests/stub_sweep.py (every composite-only op called with schema-made arguments in
    // float, integer and bool profiles) and by the conformance suite's scalar_types mode:
    "ldexp.Tensor", "ldexp.out", "ldexp_",  // an integer exponent takes a stub (float ones do not)
    "kaiser_window", "kaiser_window.periodic", "kaiser_window.beta",  // kaiser_window_stub on the result
    "kaiser_window.out", "kaiser_window.periodic_out", "kaiser_window.beta_out",
    // addr_ calls addr_out(self, self, ...), whose kernel tells in-place from out= by comparing the
    // two arguments' addresses; a boxed call gives them two, so on the device path a 0-dim self was
    // silently resized instead of refused. On the host path the CPU call keeps them one.
    "addr_",
};

// Ops whose CPU kernel checks its arguments differently from the composite kernel every GPU runs
// (PyTorch's error_inputs expect the composite's errors off the CPU): they keep the composite.
constexpr const char* kCompositeOnAccelerators[] = {
    "aten::narrow_copy",  // narrow_copy_dense_cpu asserts on a bad dim instead of raising IndexError
};

bool keeps_composite(const c10::OperatorName& name) {
  if (!name.overload_name.empty()) {
    return false;
  }
  for (const char* kept : kCompositeOnAccelerators) {
    if (name.name == kept) {
      return true;
    }
  }
  return false;
}

std::vector<c10::OperatorName> ops_with_cpu_and_composite_kernels() {
  std::vector<c10::OperatorName> names;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0 || keeps_composite(name)) {
      continue;
    }
    auto op = dispatcher.findOp(name);
    if (op && op->hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
        (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
         op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional))) {
      names.push_back(name);
    }
  }
  return names;
}

std::string unqualified(const c10::OperatorName& name) {
  std::string text = name.name.substr(name.name.find("::") + 2);
  return name.overload_name.empty() ? text : text + "." + name.overload_name;
}

// scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, *, scale, enable_gqa) as
// _scaled_dot_product_attention_math(q, k, v, mask, dropout_p, is_causal, dropout_mask, *, scale,
// enable_gqa)[0]. Called from the dispatcher's top, so autograd differentiates the decomposition.
void math_attention(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  static const c10::OperatorHandle math =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_scaled_dot_product_attention_math", "");
  std::vector<c10::IValue> args = torch::jit::pop(*stack, 8);
  torch::jit::Stack call{args[0], args[1], args[2], args[3], args[4], args[5], c10::IValue(), args[6], args[7]};
  math.callBoxed(&call);
  stack->push_back(std::move(call.at(0)));
}

// native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor), as the CPU kernel
// computes it, but with every step dispatched to the device.
void device_dropout(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  std::vector<c10::IValue> args = torch::jit::pop(*stack, 3);
  const at::Tensor input = args[0].toTensor();
  const double p = args[1].toDouble();
  const bool train = args[2].isNone() || args[2].toBool();
  at::Tensor output, mask;
  if (input.numel() == 0) {
    output = input;
    mask = at::empty_like(input);
  } else if (train) {
    const double keep = 1.0 - p;
    mask = at::empty_like(input, c10::MemoryFormat::Contiguous);
    mask.bernoulli_(keep);  // Generator? None: the fallback passes the device's generator
    output = input.mul(mask).mul_(keep == 0 ? 0.0 : 1.0 / keep);
    mask = mask.to(at::kBool);
  } else {
    mask = at::ones_like(input, input.options().dtype(at::kBool));
    output = input.clone();
  }
  stack->push_back(std::move(output));
  stack->push_back(std::move(mask));
}

// _to_copy(self, *, dtype, layout, device, pin_memory, non_blocking, memory_format): the
// composite implementation, reached through the CPU key (which has no kernel of its own),
// with non_blocking off.
void synchronous_to_copy(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = stack->end() - 7;
  const c10::Device target = args[3].isNone() ? args[0].toTensor().device() : args[3].toDevice();
  if (!args[1].isNone() && is_emulated(target.type())) {  // name the op the user called, not empty_strided
    check_dtype(target.type(), static_cast<c10::ScalarType>(args[1].toInt()), "aten::_to_copy");
  }
  args[5] = false;
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, mask). Without a
// weight, the CPU kernel raises "tensor does not have a device" when the bias gradient is asked for
// (GPUs' kernels compute it; TorchCTS): a weight of ones is the same normalization.
void contiguous_group_norm_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = stack->end() - 10;
  const at::Tensor input = args[1].toTensor();
  const auto format = input.suggest_memory_format();
  args[0] = args[0].toTensor().contiguous(format);
  args[1] = input.contiguous(format);
  if (args[4].isNone() || !args[4].toTensor().defined()) {
    args[4] = at::ones({args[6].toInt()}, input.options());
  }
  run_on_host(op, stack);
}

// _copy_from(Tensor self, Tensor dst, bool non_blocking) -> Tensor: dst, holding self's values.
void copy_from(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  std::vector<c10::IValue> args = torch::jit::pop(*stack, 3);
  at::Tensor dst = args[1].toTensor();
  dst.copy_(args[0].toTensor());
  stack->push_back(std::move(dst));
}

// _copy_from_and_resize(Tensor self, Tensor dst) -> Tensor: dst, resized to self and holding it.
void copy_from_and_resize(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  std::vector<c10::IValue> args = torch::jit::pop(*stack, 2);
  const at::Tensor source = args[0].toTensor();
  at::Tensor dst = args[1].toTensor();
  dst.resize_(source.sizes());
  dst.copy_(source);
  stack->push_back(std::move(dst));
}

// _use_{cudnn,miopen}_ctc_loss[.Tensor](log_probs, targets, input_lengths, target_lengths, blank)
// -> bool, which ctc_loss asks on a 'cuda' device and which only CUDA builds implement: there is
// neither cuDNN nor MIOpen here.
constexpr const char* kVendorLibraryProbes[] = {
    "_use_cudnn_ctc_loss", "_use_cudnn_ctc_loss.Tensor", "_use_miopen_ctc_loss", "_use_miopen_ctc_loss.Tensor"};

void no_vendor_library(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
  torch::jit::drop(*stack, 5);
  stack->push_back(false);
}

// mm, bmm, addmm and baddbmm with out_dtype (the .dtype and .dtype_out overloads), which only CUDA
// builds implement: the inputs are widened to out_dtype and the plain op runs on the device, so
// fp16/bf16 products accumulate in fp32 as they do on a GPU.
constexpr const char* kOutDtypeMatmuls[] = {"mm.dtype", "mm.dtype_out", "bmm.dtype", "bmm.dtype_out",
                                            "addmm.dtype", "addmm.dtype_out", "baddbmm.dtype", "baddbmm.dtype_out"};

void matmul_with_out_dtype(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  std::vector<c10::IValue> args = torch::jit::pop(*stack, arguments.size());
  const auto at = [&](const char* name) { return *schema.argumentIndexWithName(name); };
  const auto out_dtype = static_cast<c10::ScalarType>(args[at("out_dtype")].toInt());
  const c10::ScalarType input = args[0].toTensor().scalar_type();
  TORCH_CHECK(out_dtype == input || (out_dtype == at::kFloat && (input == at::kHalf || input == at::kBFloat16)),
              op.operator_name(), ": out_dtype must be the inputs' dtype, or float32 for float16/bfloat16 inputs; got ",
              out_dtype, " for ", input, " inputs");
  const c10::OperatorHandle plain =
      c10::Dispatcher::singleton().findSchemaOrThrow(op.operator_name().name.c_str(), "");
  torch::jit::Stack call;
  for (const c10::Argument& argument : plain.schema().arguments()) {
    const c10::IValue& value = args[at(argument.name().c_str())];
    call.push_back(value.isTensor() ? c10::IValue(value.toTensor().to(out_dtype)) : value);
  }
  plain.callBoxed(&call);
  at::Tensor result = call.at(0).toTensor();
  if (schema.overload_name() == "dtype_out") {
    at::Tensor out = args[at("out")].toTensor();
    out.resize_(result.sizes()).copy_(result);
    result = out;
  }
  stack->push_back(std::move(result));
}

// _softmax / _log_softmax(self, dim, half_to_float): the CPU kernel refuses half_to_float (float16
// in, float32 out), so the input is widened first, which is what the GPU kernel computes.
void widening_softmax(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = stack->end() - 3;
  if (args[2].toBool()) {
    args[0] = args[0].toTensor().to(at::kFloat);
    args[2] = false;
  }
  run_on_host(op, stack);
}

// _softmax_backward_data / _log_softmax_backward_data(grad_output, output, dim, input_dtype): after
// a half_to_float forward the gradients are float32 and the input float16. Computed in float32,
// returned in the input's dtype, as on a GPU.
void narrowing_softmax_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = stack->end() - 4;
  const auto input_dtype = static_cast<c10::ScalarType>(args[3].toInt());
  const c10::ScalarType grad_dtype = args[0].toTensor().scalar_type();
  args[3] = static_cast<int64_t>(grad_dtype);
  run_on_host(op, stack);
  if (input_dtype != grad_dtype) {
    stack->back() = stack->back().toTensor().to(input_dtype);
  }
}

c10::DispatchKey autograd_key(c10::DeviceType type) { return emulated_type(type).autograd_key; }

}  // namespace

void register_composite_overrides(c10::DeviceType type) {
  static const std::vector<c10::OperatorName> direct = ops_with_cpu_and_composite_kernels();
  torch::Library& host = kept_library(torch::Library::IMPL, "aten", dispatch_key(type), __FILE__, __LINE__);
  for (const char* name : kHostPathOps) {
    host.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  }
  for (const c10::OperatorName& name : direct) {
    if (name.name == "aten::_softmax" || name.name == "aten::_log_softmax" ||
        name.name == "aten::_softmax_backward_data" || name.name == "aten::_log_softmax_backward_data") {
      continue;  // kernels of their own below
    }
    host.impl(unqualified(name).c_str(), torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  }
  if (type != c10::DeviceType::CUDA) {  // emulated cuda chooses among CUDA's kernels (cuda_attention.cpp)
    host.impl("scaled_dot_product_attention", noted<&math_attention>());
  }
  host.impl("native_dropout", noted<&device_dropout>());
  host.impl("native_group_norm_backward",
             noted<&contiguous_group_norm_backward>());
  host.impl("_to_copy", noted<&synchronous_to_copy>());
  for (const char* name : {"_softmax", "_log_softmax"}) {
    host.impl(name, noted<&widening_softmax>());
  }
  for (const char* name : {"_softmax_backward_data", "_log_softmax_backward_data"}) {
    host.impl(name, noted<&narrowing_softmax_backward>());
  }
  host.impl("_copy_from", noted<&copy_from>());
  host.impl("_copy_from_and_resize", noted<&copy_from_and_resize>());
  for (const char* name : kOutDtypeMatmuls) {
    host.impl(name, noted<&matmul_with_out_dtype>());
  }
  for (const char* name : kVendorLibraryProbes) {
    host.impl(name, noted<&no_vendor_library>());
  }
  // An implicit composite with a backend kernel loses its autograd formula on that backend, so the
  // math decomposition is registered for the backend's autograd key too.
  torch::Library& grad = kept_library(torch::Library::IMPL, "aten", autograd_key(type), __FILE__, __LINE__);
  if (type != c10::DeviceType::CUDA) {
    grad.impl("scaled_dot_product_attention", noted<&math_attention>());
  }
  register_device_results(type);  // after the host path above: these kernels replace some of it
}

}  // namespace torchplug::emulation
