// Results as the device's own kernels give them, where those differ from the CPU kernel's that the
// host path runs (docs/emulation.md, "CUDA's results on emulated cuda"). Found by the conformance
// suite's meta mode (results against torch's meta functions for the device type) and by TorchCTS.
//
//  * Layouts: ops whose result strides torch's meta function gives otherwise for a GPU than the CPU
//    kernel makes (fft's r2c/c2r: CUDA keeps the transformed dimensions' order its plan used). The
//    result is copied into the layout the meta function computes on meta tensors, which torch's meta
//    functions lay out as CUDA's kernels do (device_hint: "default to cuda"). Also svd's Vh and
//    eig's vectors (row-major from cuSOLVER), nonzero_static (column-major, as nonzero everywhere).
//  * Normalization (every emulated type, as the meta functions say for any device but the CPU):
//    float16/bfloat16 batch and layer norm computed in float32, with float32 saved statistics and
//    any mix of parameter dtypes; eval-mode batch norm saves the running statistics, not nothing.
//  * log_sigmoid_forward's buffer is empty on cuda and xpu, as their kernels return it; a
//    non-finite grid_sample coordinate samples zero there (zero padding), as their kernels do.
//  * What only CUDA's kernels compute (emulated cuda, and rocm, which emulates the same type): LU
//    without pivoting, sums of complex32, nansum of complex numbers; histc's dtypes; float32
//    arithmetic where CUDA's low-precision kernels use it; and edge values where CUDA's kernel is
//    known to differ from the CPU's (logit_backward's sign of zero).
#include "emulation.h"
#include "registration.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/histc.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace torchplug::emulation {

namespace {

using torch::jit::Stack;

// ---- helpers over boxed calls ----------------------------------------------------------------

const c10::IValue& arg(const c10::OperatorHandle& op, const Stack& stack, const char* name) {
  const auto& schema = op.schema();
  const auto index = schema.argumentIndexWithName(name);
  TORCH_INTERNAL_ASSERT(index.has_value(), op.operator_name(), " has no argument ", name);
  return stack[stack.size() - schema.arguments().size() + *index];
}

// The arguments an out= overload writes (empty for a functional overload), in schema order.
std::vector<at::Tensor> out_arguments(const c10::OperatorHandle& op, const Stack& stack) {
  std::vector<at::Tensor> outs;
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].is_out()) {
      outs.push_back(stack[stack.size() - arguments.size() + i].toTensor());
    }
  }
  return outs;
}

// How an out= overload takes an out= tensor of another dtype: structured kernels refuse it,
// TensorIterator kernels cast into it where the cast is safe, a few (CUDA's histc.out) copy into it.
enum class OutDtype { Exact, SafeCast, Cast };

// Replaces the op's arguments on the stack with its results: `results` as they are for a functional
// overload, written into (and returned as) its out= tensors otherwise.
void finish(const c10::OperatorHandle& op, Stack* stack, const std::vector<at::Tensor>& results,
            OutDtype out_dtype = OutDtype::Exact) {
  std::vector<at::Tensor> outs = out_arguments(op, *stack);
  for (size_t i = 0; i < outs.size(); ++i) {  // a GPU refuses an out= tensor on another device
    TORCH_CHECK(outs[i].device() == results[i].device(), "Expected all tensors to be on the same device, but got out= "
                "tensor ", i, " on ", outs[i].device(), ", different from other tensors on ", results[i].device(),
                " (when checking arguments for ", op.operator_name(), ")");
    const c10::ScalarType got = outs[i].scalar_type(), want = results[i].scalar_type();
    TORCH_CHECK(out_dtype != OutDtype::Exact || got == want, op.operator_name(),
                ": Expected out tensor to have dtype ", want, ", but got ", got, " instead");
    TORCH_CHECK(out_dtype != OutDtype::SafeCast || at::canCast(want, got), op.operator_name(), ": result type ",
                want, " can't be cast to the desired output type ", got);
  }
  torch::jit::drop(*stack, op.schema().arguments().size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (outs.empty()) {
      stack->push_back(results[i]);
    } else {
      outs[i].resize_(results[i].sizes()).copy_(results[i]);
      stack->push_back(outs[i]);
    }
  }
}

// ---- layouts from the meta function --------------------------------------------------------------

c10::IValue on_meta(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return t.defined() ? c10::IValue(at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta))) : value;
  }
  return value;
}

// Ops whose functional overload's result layout torch's meta function gives otherwise for CUDA.
constexpr const char* kMetaLaidOut[] = {"_fft_r2c", "_fft_c2r", "_fft_c2c", "_linalg_svd", "linalg_eig", "nonzero_static"};

void laid_out_as_meta(const c10::OperatorHandle& op, Stack* stack) {
  const size_t nargs = op.schema().arguments().size();
  Stack meta;
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(nargs); it != stack->end(); ++it) {
    meta.push_back(on_meta(*it));
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  run_on_host(op, stack);
  const size_t nreturns = op.schema().returns().size();
  for (size_t i = 0; i < nreturns; ++i) {
    c10::IValue& result = (*stack)[stack->size() - nreturns + i];
    const c10::IValue& expected = meta[meta.size() - nreturns + i];
    if (!result.isTensor() || !expected.isTensor()) {
      continue;
    }
    const at::Tensor& got = result.toTensor();
    const at::Tensor& want = expected.toTensor();
    if (got.sizes() == want.sizes() && got.strides() != want.strides()) {
      result = at::empty_strided(want.sizes(), want.strides(), got.options()).copy_(got);
    }
  }
}

// ---- normalization as GPUs compute it ------------------------------------------------------------

bool low_precision(c10::ScalarType dtype) {
  return dtype == at::kHalf || dtype == at::kBFloat16;
}

bool written_argument(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

// A GPU normalizes float16/bfloat16 in float32: it takes weights and running statistics in either
// dtype, returns the saved statistics (batch norm's mean and invstd, layer norm's mean and rstd) in
// float32 and takes them so in the backward ("expected scalar type Half but found Float" on the CPU,
// whose kernels want one dtype throughout, or float32 parameters, and return the statistics in the
// input's dtype). So low-precision calls run with every floating argument widened to float32
// (running statistics written back); the first result (the output, or grad_input) returns to the
// input's dtype and a backward's parameter gradients to the weight's. `kInput` is the input's place.
template <size_t kInput>
void widened_normalization(const c10::OperatorHandle& op, Stack* stack) {
  const auto& arguments = op.schema().arguments();
  auto args = stack->end() - static_cast<std::ptrdiff_t>(arguments.size());
  const c10::ScalarType input_dtype = args[kInput].toTensor().scalar_type();
  if (!low_precision(input_dtype)) {
    run_on_host(op, stack);
    return;
  }
  c10::ScalarType parameter_dtype = input_dtype;
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (the caller's tensor, its widened copy)
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!args[i].isTensor() || !args[i].toTensor().defined()) {
      continue;
    }
    at::Tensor t = args[i].toTensor();
    if (arguments[i].name() == "weight") {
      parameter_dtype = t.scalar_type();
    }
    if (low_precision(t.scalar_type())) {
      at::Tensor wide = t.to(at::kFloat);
      if (written_argument(arguments[i])) {
        written.emplace_back(t, wide);
      }
      args[i] = wide;
    }
  }
  run_on_host(op, stack);
  for (auto& [caller, wide] : written) {
    caller.copy_(wide);
  }
  const size_t nreturns = op.schema().returns().size();
  auto results = stack->end() - static_cast<std::ptrdiff_t>(nreturns);
  for (size_t j = 0; j < nreturns && (j == 0 || kInput > 0) && j < 3; ++j) {
    if (results[j].isTensor() && results[j].toTensor().defined()) {
      results[j] = results[j].toTensor().to(j == 0 ? input_dtype : parameter_dtype);
    }
  }
}

// Batch norm's forward ops. A GPU's eval mode returns the running mean and 1/sqrt(running_var + eps)
// (in float32 for low precision) as the saved statistics; the CPU's empty tensors. native_batch_norm
// and _native_batch_norm_legit say which mode by `training`; _batch_norm_with_update trains, and
// _native_batch_norm_legit_no_training and _batch_norm_no_update evaluate.
void batch_norm_forward(const c10::OperatorHandle& op, Stack* stack) {
  const auto& schema = op.schema();
  const bool training = schema.argumentIndexWithName("training").has_value()
                            ? arg(op, *stack, "training").toBool()
                            : op.operator_name().name == "aten::_batch_norm_with_update";
  at::Tensor running_mean, running_var;
  double eps = 0.0;
  if (!training && schema.argumentIndexWithName("running_mean").has_value()) {
    const c10::IValue& mean = arg(op, *stack, "running_mean");
    const c10::IValue& var = arg(op, *stack, "running_var");
    running_mean = mean.isTensor() ? mean.toTensor() : at::Tensor();
    running_var = var.isTensor() ? var.toTensor() : at::Tensor();
    eps = arg(op, *stack, "eps").toDouble();
  }
  const c10::ScalarType input_dtype = arg(op, *stack, "input").toTensor().scalar_type();
  widened_normalization<0>(op, stack);
  if (!running_mean.defined() || !running_var.defined()) {
    return;
  }
  const auto acc = input_dtype == at::kDouble ? at::kDouble : at::kFloat;
  auto results = stack->end() - static_cast<std::ptrdiff_t>(schema.returns().size());
  results[1] = running_mean.to(acc, /*non_blocking=*/false, /*copy=*/true);
  results[2] = running_var.to(acc).add(eps).rsqrt_();
}

constexpr const char* kBatchNormForward[] = {
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit.no_stats",
    "_native_batch_norm_legit_no_training", "_batch_norm_with_update", "_batch_norm_no_update"};
constexpr const char* kNormalizationBackward[] = {"native_batch_norm_backward", "batch_norm_backward",
                                                  "native_layer_norm_backward"};

// log_sigmoid_forward's buffer: CUDA's and XPU's kernels return an empty one (their backward does
// not read it), the CPU's exp(-|x|), which the CPU's backward reads: it is made again there.
void log_sigmoid_without_buffer(const c10::OperatorHandle& op, Stack* stack) {
  run_on_host(op, stack);
  const at::Tensor output = (*stack)[stack->size() - 2].toTensor();
  stack->back() = at::empty({0}, output.options());
}

void log_sigmoid_backward_rebuffered(const c10::OperatorHandle& op, Stack* stack) {
  c10::IValue& buffer = (*stack)[stack->size() - op.schema().arguments().size() + 2];
  const at::Tensor self = arg(op, *stack, "self").toTensor();
  if (buffer.toTensor().sizes() != self.sizes()) {
    buffer = self.abs().neg_().exp_();
  }
  run_on_host(op, stack);
}

// ---- LU without pivoting -------------------------------------------------------------------------

struct Lu {
  at::Tensor lu, pivots, info;
};

// Doolittle's elimination on the batch, in LAPACK's column-major layout; info is the 1-based index
// of the first zero pivot, as getrf reports it.
Lu lu_without_pivoting(const at::Tensor& a) {
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  at::Tensor lu = a.mT().contiguous().mT();
  for (int64_t j = 0; j + 1 < m && j < k; ++j) {
    at::Tensor below = lu.narrow(-2, j + 1, m - j - 1).narrow(-1, j, 1);
    below.div_(lu.narrow(-2, j, 1).narrow(-1, j, 1));
    if (j + 1 < n) {
      lu.narrow(-2, j + 1, m - j - 1).narrow(-1, j + 1, n - j - 1)
          .sub_(below.mul(lu.narrow(-2, j, 1).narrow(-1, j + 1, n - j - 1)));
    }
  }
  const auto int_options = a.options().dtype(at::kInt);
  at::Tensor zero_pivot = lu.diagonal(0, -2, -1).eq(0);
  at::Tensor first = zero_pivot.to(at::kInt).argmax(-1).to(at::kInt).add_(1);
  at::Tensor info = at::where(zero_pivot.any(-1), first, at::zeros({}, int_options));
  auto batch = a.sizes().vec();
  batch.pop_back();
  batch.back() = k;
  at::Tensor pivots = at::arange(1, k + 1, int_options).expand(batch).contiguous();
  return {lu, pivots, info};
}

// linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info), and its out= form.
void lu_factor_without_pivoting(const c10::OperatorHandle& op, Stack* stack) {
  if (arg(op, *stack, "pivot").toBool()) {
    run_on_host(op, stack);
    return;
  }
  const at::Tensor a = arg(op, *stack, "A").toTensor();
  TORCH_CHECK(a.dim() >= 2, "torch.linalg.lu_factor_ex: The input tensor A must have at least 2 dimensions.");
  Lu lu = lu_without_pivoting(a);
  if (arg(op, *stack, "check_errors").toBool()) {
    at::_linalg_check_errors(lu.info, "torch.linalg.lu_factor_ex", a.dim() == 2);
  }
  finish(op, stack, {lu.lu, lu.pivots, lu.info});
}

// linalg_lu(A, *, pivot) -> (P, L, U), and its out= form: P is empty without pivoting.
void lu_without_pivoting_unpacked(const c10::OperatorHandle& op, Stack* stack) {
  if (arg(op, *stack, "pivot").toBool()) {
    run_on_host(op, stack);
    return;
  }
  const at::Tensor a = arg(op, *stack, "A").toTensor();
  TORCH_CHECK(a.dim() >= 2, "linalg.lu: Expected tensor with 2 or more dimensions. Got size: ", a.sizes(), " instead");
  const int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  at::Tensor lu = lu_without_pivoting(a).lu;
  at::Tensor unit = at::eye(m, k, a.options());
  at::Tensor l = lu.narrow(-1, 0, k).tril(-1).add_(unit).contiguous();
  at::Tensor u = lu.narrow(-2, 0, k).triu().contiguous();
  finish(op, stack, {at::empty({0}, a.options()), l, u});
}

// ---- reductions only CUDA's kernels take -----------------------------------------------------------

// An `int[1]? dim` argument; the vector keeps the dimensions alive while the reference is used.
struct Dims {
  std::vector<int64_t> held;
  at::OptionalIntArrayRef ref;
  explicit Dims(const c10::IValue& dim) {
    if (!dim.isNone()) {
      held = dim.toIntVector();
      ref = held;
    }
  }
};

// The dtype a reduction computes in: its dtype argument, else its out= tensor's (as torch's
// infer_dtype_from_optional and get_dtype_from_result choose), else none (the input's).
std::optional<c10::ScalarType> reduction_dtype(const c10::OperatorHandle& op, const Stack& stack) {
  const c10::IValue& dtype = arg(op, stack, "dtype");
  if (!dtype.isNone()) {
    return static_cast<c10::ScalarType>(dtype.toInt());
  }
  std::vector<at::Tensor> outs = out_arguments(op, stack);
  return outs.empty() ? std::nullopt : std::optional<c10::ScalarType>(outs[0].scalar_type());
}

// sum over complex32, which CUDA sums (in complex64) and the CPU refuses; other dtypes as before.
void complex_half_sum(const c10::OperatorHandle& op, Stack* stack) {
  const at::Tensor self = arg(op, *stack, "self").toTensor();
  const std::optional<c10::ScalarType> dtype = reduction_dtype(op, *stack);
  if (self.scalar_type() != at::kComplexHalf || (dtype.has_value() && *dtype != at::kComplexHalf)) {
    run_on_host(op, stack);
    return;
  }
  at::Tensor wide = self.to(at::kComplexFloat);
  const bool has_dim = op.schema().argumentIndexWithName("dim").has_value();
  at::Tensor sum;
  if (has_dim) {
    const Dims dims(arg(op, *stack, "dim"));
    sum = at::sum(wide, dims.ref, arg(op, *stack, "keepdim").toBool());
  } else {
    sum = at::sum(wide);
  }
  finish(op, stack, {sum.to(at::kComplexHalf)});
}

// nansum over complex numbers, which CUDA computes (an element with a NaN part counts as zero) and
// the CPU refuses ("nansum on CPU does not support complex inputs").
void complex_nansum(const c10::OperatorHandle& op, Stack* stack) {
  const at::Tensor self = arg(op, *stack, "self").toTensor();
  if (!self.is_complex()) {
    run_on_host(op, stack);
    return;
  }
  at::Tensor kept = at::where(self.isnan(), at::zeros({}, self.options()), self);
  const Dims dims(arg(op, *stack, "dim"));
  at::Tensor sum = at::sum(kept, dims.ref, arg(op, *stack, "keepdim").toBool(), reduction_dtype(op, *stack));
  finish(op, stack, {sum});
}

// The coverage audit sees these kernels as it sees the host path's (run_on_host notes its own calls).
// ---- edge values as CUDA's kernels give them ----------------------------------------------------

// logit_backward(grad_output, self, eps?) as CUDA's kernel computes it (BinaryMiscBackwardOpsKernels.cu):
// dy / (x * (1 - x)) in the accumulation type, NaN outside [0, 1] without eps and 0 outside
// [eps, 1 - eps] with it. So -0.0 gives -inf at any length; the CPU's vectorized loop loses the sign
// of zero in some lanes (TorchCTS, test_logit_backward_negative_zero_is_simd_width_independent).
void cuda_logit_backward(const c10::OperatorHandle& op, Stack* stack) {
  const at::Tensor grad = arg(op, *stack, "grad_output").toTensor();
  const at::Tensor self = arg(op, *stack, "self").toTensor();
  const c10::IValue& eps = arg(op, *stack, "eps");
  const c10::ScalarType dtype = at::result_type(grad, self);
  if (!at::isFloatingType(dtype)) {
    run_on_host(op, stack);  // the CPU's own error for other dtypes
    return;
  }
  const auto acc = low_precision(dtype) ? at::kFloat : dtype;
  const at::Tensor x = self.to(acc);
  const at::Tensor value = grad.to(acc).div(x.mul(x.neg().add_(1)));
  const bool clamped = !eps.isNone() && eps.toDouble() >= 0;
  const double lo = clamped ? eps.toDouble() : 0.0;
  const at::Tensor outside = x.lt(lo).logical_or_(x.gt(1.0 - lo));
  const double fill = clamped ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  finish(op, stack, {at::where(outside, at::scalar_tensor(fill, value.options()), value).to(dtype)},
         OutDtype::SafeCast);
}

// ---- float32 where CUDA computes in float32 ------------------------------------------------------

// Ops whose float16/bfloat16 kernels on CUDA compute in float32 (opmath) and round once, where the
// CPU's round intermediate values (grid_sampler's coordinates and gradients, segment_reduce's and
// soft_margin_loss's gradients, matrix_exp's products: NaN or inf where float32 gives finite values;
// TorchCTS holds them to a float32 reference). Every floating argument is widened to float32, the
// CPU kernel runs, and the floating results return to the low-precision dtype.
void widened_to_float32(const c10::OperatorHandle& op, Stack* stack) {
  const auto& arguments = op.schema().arguments();
  auto args = stack->end() - static_cast<std::ptrdiff_t>(arguments.size());
  std::optional<c10::ScalarType> narrow;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (args[i].isTensor() && args[i].toTensor().defined() && low_precision(args[i].toTensor().scalar_type())) {
      narrow = narrow.value_or(args[i].toTensor().scalar_type());
      args[i] = args[i].toTensor().to(at::kFloat);
    }
  }
  run_on_host(op, stack);
  if (!narrow) {
    return;
  }
  const size_t nreturns = op.schema().returns().size();
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(nreturns); it != stack->end(); ++it) {
    if (it->isTensor() && it->toTensor().defined() && it->toTensor().scalar_type() == at::kFloat) {
      *it = it->toTensor().to(*narrow);
    }
  }
}

// histc(self, bins, min, max) as CUDA's _histc_cuda takes dtypes: float16 refused ("HalfTensor is not
// supported"), bfloat16 not dispatched, integers counted (in their own dtype, bounds truncated to
// integers); the CPU kernel counts float16/bfloat16 in their own precision (TorchCTS) and refuses
// integers.
void cuda_histc(const c10::OperatorHandle& op, Stack* stack) {
  const at::Tensor self = arg(op, *stack, "self").toTensor();
  const c10::ScalarType dtype = self.scalar_type();
  TORCH_CHECK(dtype != at::kHalf, "HalfTensor is not supported");
  TORCH_CHECK_NOT_IMPLEMENTED(dtype != at::kBFloat16, "\"histc\" not implemented for 'BFloat16'");
  if (!at::isIntegralType(dtype, /*includeBool=*/false)) {
    run_on_host(op, stack);
    return;
  }
  const auto bound = [&](const char* name) {
    return static_cast<double>(arg(op, *stack, name).toScalar().to<int64_t>());
  };
  at::Tensor counts = at::histc(self.to(at::kDouble), arg(op, *stack, "bins").toInt(), bound("min"), bound("max"));
  finish(op, stack, {counts.to(dtype)}, OutDtype::Cast);
}

constexpr const char* kFloat32OnCuda[] = {"_segment_reduce_backward", "soft_margin_loss_backward", "linalg_matrix_exp"};

// grid_sampler_2d/3d and their backward with zero padding, as CUDA's and XPU's kernels take a
// non-finite coordinate: GridSampler.cuh's safe_downgrade_to_int_range makes its pixel index -100,
// outside the input, so the point samples zero and gets no gradient. The CPU's vectorized kernel
// gives NaN there. Such grid entries are given the normalized coordinate of pixel -100 on their
// axis (x: the input's last dimension, y the one before, z the one before that) before the CPU
// kernel runs; finite coordinates are untouched.
void grid_sampler_with_nonfinite_coordinates(const c10::OperatorHandle& op, Stack* stack) {
  constexpr int64_t kZerosPadding = 0;
  c10::IValue& grid_value = (*stack)[stack->size() - op.schema().arguments().size() + *op.schema().argumentIndexWithName("grid")];
  const at::Tensor grid = grid_value.toTensor();
  if (arg(op, *stack, "padding_mode").toInt() == kZerosPadding && grid.is_floating_point() &&
      !grid.isfinite().all().item<bool>()) {
    const at::Tensor input = arg(op, *stack, "input").toTensor();
    const bool align_corners = arg(op, *stack, "align_corners").toBool();
    std::vector<double> far;
    for (int64_t k = 0; k < grid.size(-1); ++k) {
      const auto size = static_cast<double>(input.size(input.dim() - 1 - k));
      // grid_sampler_unnormalize's inverse at pixel -100
      far.push_back(align_corners ? (size > 1 ? -200.0 / (size - 1) - 1.0 : -std::numeric_limits<double>::infinity())
                                  : (2.0 * -100.0 + 1.0) / size - 1.0);
    }
    const at::Tensor replacement = at::tensor(far, at::TensorOptions().dtype(at::kDouble)).to(grid.options());
    grid_value = at::where(grid.isfinite(), grid, replacement);
  }
  if (op.schema().arguments().front().type()->kind() == c10::TypeKind::TensorType &&
      arg(op, *stack, "input").toTensor().device().type() == c10::DeviceType::CUDA) {
    widened_to_float32(op, stack);  // CUDA computes low-precision grid sampling in float32
  } else {
    run_on_host(op, stack);
  }
}

}  // namespace

void register_device_results(c10::DeviceType type) {
  torch::Library& lib = kept_library(torch::Library::IMPL, "aten", dispatch_key(type), __FILE__, __LINE__);
  for (const char* name : kBatchNormForward) {
    lib.impl(name, noted<&batch_norm_forward>());
  }
  lib.impl("native_layer_norm", noted<&widened_normalization<0>>());
  for (const char* name : kNormalizationBackward) {
    lib.impl(name, noted<&widened_normalization<1>>());
  }
  if (type == c10::DeviceType::CUDA || type == c10::DeviceType::XPU) {
    for (const char* name : {"grid_sampler_2d", "grid_sampler_3d", "grid_sampler_2d_backward", "grid_sampler_3d_backward"}) {
      lib.impl(name, noted<&grid_sampler_with_nonfinite_coordinates>());
    }
    lib.impl("log_sigmoid_forward", noted<&log_sigmoid_without_buffer>());
    lib.impl("log_sigmoid_backward", noted<&log_sigmoid_backward_rebuffered>());
  }
  if (type == c10::DeviceType::CUDA) {
    for (const char* name : kMetaLaidOut) {
      lib.impl(name, noted<&laid_out_as_meta>());
    }
    for (const char* name : {"linalg_lu_factor_ex", "linalg_lu_factor_ex.out"}) {
      lib.impl(name, noted<&lu_factor_without_pivoting>());
    }
    for (const char* name : {"linalg_lu", "linalg_lu.out"}) {
      lib.impl(name, noted<&lu_without_pivoting_unpacked>());
    }
    for (const char* name : {"sum", "sum.out", "sum.dim_IntList", "sum.IntList_out"}) {
      lib.impl(name, noted<&complex_half_sum>());
    }
    for (const char* name : {"nansum", "nansum.out"}) {
      lib.impl(name, noted<&complex_nansum>());
    }
    for (const char* name : {"histc", "histc.out"}) {
      lib.impl(name, noted<&cuda_histc>());
    }
    for (const char* name : kFloat32OnCuda) {
      lib.impl(name, noted<&widened_to_float32>());
    }
    for (const char* name : {"logit_backward", "logit_backward.grad_input"}) {
      lib.impl(name, noted<&cuda_logit_backward>());
    }
    register_cuda_attention(type);
  }
}

}  // namespace torchplug::emulation
