// RMS normalisation for Apple GPUs: rms_norm, fused_add_rms_norm_ and rms_norm's backward.
// One threadgroup per row; its threads stride over the row and reduce through SIMD groups.
// Rows are contiguous and the weight is float32 (the host prepares both); arithmetic is float32
// and each result is rounded once to the row's type, like the other backends' kernels.
#include <metal_stdlib>
using namespace metal;

constant constexpr uint kMaxSimdGroups = 32;  // 1024 threads per threadgroup / 32 lanes

// The sum of `value` over the threadgroup, returned to every thread.
inline float threadgroup_sum(float value, threadgroup float* scratch, uint lane, uint simd, uint simds) {
  value = simd_sum(value);
  if (lane == 0) {
    scratch[simd] = value;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  value = simd_sum(lane < simds ? scratch[lane] : 0.0f);
  threadgroup_barrier(mem_flags::mem_threadgroup);  // scratch may be reused after this
  return value;
}

// Where a thread is: its threadgroup (= row), its place in it, and its SIMD group.
struct RowThread {
  uint row, tid, threads, lane, simd, simds;
};

template <typename T>
void rms_norm(device const T* x, device const float* weight, device T* out, long hidden, float eps, RowThread t,
              threadgroup float* scratch) {
  const uint row = t.row, tid = t.tid, threads = t.threads;
  device const T* x_row = x + row * hidden;
  device T* out_row = out + row * hidden;
  float squares = 0.0f;
  for (long i = tid; i < hidden; i += threads) {
    const float v = float(x_row[i]);
    squares += v * v;
  }
  const float inv_rms = rsqrt(threadgroup_sum(squares, scratch, t.lane, t.simd, t.simds) / float(hidden) + eps);
  for (long i = tid; i < hidden; i += threads) {
    out_row[i] = T(float(x_row[i]) * inv_rms * weight[i]);
  }
}

// residual += x, stored rounded; then x = rms_norm(residual) * weight, from the stored sum.
template <typename T>
void fused_add_rms_norm(device T* x, device T* residual, device const float* weight, long hidden, float eps,
                        RowThread t, threadgroup float* scratch) {
  const uint row = t.row, tid = t.tid, threads = t.threads;
  device T* x_row = x + row * hidden;
  device T* res_row = residual + row * hidden;
  float squares = 0.0f;
  for (long i = tid; i < hidden; i += threads) {
    const T summed = T(float(x_row[i]) + float(res_row[i]));
    res_row[i] = summed;
    squares += float(summed) * float(summed);
  }
  const float inv_rms = rsqrt(threadgroup_sum(squares, scratch, t.lane, t.simd, t.simds) / float(hidden) + eps);
  for (long i = tid; i < hidden; i += threads) {  // each thread reads back only what it stored
    x_row[i] = T(float(res_row[i]) * inv_rms * weight[i]);
  }
}

// dx = inv_rms * (g * w - x_hat * mean(g * w * x_hat)) (+ grad_residual); saves inv_rms per row
// for rms_norm_grad_weight. `has_residual_grad` is 0 or 1 (grad_residual is then read).
template <typename T>
void rms_norm_grad_input(device const T* grad, device const T* x, device const float* weight,
                         device const T* grad_residual, device T* dx, device float* inv_rms_out, long hidden,
                         float eps, long has_residual_grad, RowThread t, threadgroup float* scratch) {
  const uint row = t.row, tid = t.tid, threads = t.threads;
  const long offset = row * hidden;
  float squares = 0.0f, gw_x = 0.0f;
  for (long i = tid; i < hidden; i += threads) {
    const float v = float(x[offset + i]);
    squares += v * v;
    gw_x += float(grad[offset + i]) * weight[i] * v;
  }
  const float inv_rms = rsqrt(threadgroup_sum(squares, scratch, t.lane, t.simd, t.simds) / float(hidden) + eps);
  const float mean_gw_xhat = threadgroup_sum(gw_x, scratch, t.lane, t.simd, t.simds) * inv_rms / float(hidden);
  for (long i = tid; i < hidden; i += threads) {
    const float x_hat = float(x[offset + i]) * inv_rms;
    float d = inv_rms * (float(grad[offset + i]) * weight[i] - x_hat * mean_gw_xhat);
    if (has_residual_grad) {
      d += float(grad_residual[offset + i]);
    }
    dx[offset + i] = T(d);
  }
  if (tid == 0) {
    inv_rms_out[row] = inv_rms;
  }
}

// dweight[j] = sum over rows of grad[r, j] * x[r, j] * inv_rms[r]: one thread per column, in row order.
template <typename T>
void rms_norm_grad_weight(device const T* grad, device const T* x, device const float* inv_rms, device float* dweight,
                          long rows, long hidden, uint column) {
  if (long(column) >= hidden) {
    return;
  }
  float sum = 0.0f;
  for (long r = 0; r < rows; ++r) {
    sum += float(grad[r * hidden + column]) * float(x[r * hidden + column]) * inv_rms[r];
  }
  dweight[column] = sum;
}

// The row kernels' thread-position arguments, and the RowThread they make.
#define ROW_THREAD_ARGS                                                                                    \
  uint row [[threadgroup_position_in_grid]], uint tid [[thread_position_in_threadgroup]],                   \
      uint threads [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],                    \
      uint simd [[simdgroup_index_in_threadgroup]], uint simds [[simdgroups_per_threadgroup]]
#define ROW_THREAD RowThread{row, tid, threads, lane, simd, simds}

// One kernel per op and type, named <op>_<type> (float, half, bfloat).
#define INSTANTIATE_NORMS(T, NAME)                                                                        \
  kernel void rms_norm_##NAME(device const T* x, device const float* weight, device T* out,              \
                              constant long& hidden, constant float& eps, ROW_THREAD_ARGS) {              \
    threadgroup float scratch[kMaxSimdGroups];                                                            \
    rms_norm<T>(x, weight, out, hidden, eps, ROW_THREAD, scratch);                                        \
  }                                                                                                       \
  kernel void fused_add_rms_norm_##NAME(device T* x, device T* residual, device const float* weight,     \
                                        constant long& hidden, constant float& eps, ROW_THREAD_ARGS) {    \
    threadgroup float scratch[kMaxSimdGroups];                                                            \
    fused_add_rms_norm<T>(x, residual, weight, hidden, eps, ROW_THREAD, scratch);                         \
  }                                                                                                       \
  kernel void rms_norm_grad_input_##NAME(device const T* grad, device const T* x, device const float* weight, \
                                         device const T* grad_residual, device T* dx, device float* inv_rms,  \
                                         constant long& hidden, constant float& eps,                      \
                                         constant long& has_residual_grad, ROW_THREAD_ARGS) {             \
    threadgroup float scratch[kMaxSimdGroups];                                                            \
    rms_norm_grad_input<T>(grad, x, weight, grad_residual, dx, inv_rms, hidden, eps, has_residual_grad,   \
                           ROW_THREAD, scratch);                                                          \
  }                                                                                                       \
  kernel void rms_norm_grad_weight_##NAME(device const T* grad, device const T* x, device const float* inv_rms, \
                                          device float* dweight, constant long& rows, constant long& hidden,  \
                                          uint column [[thread_position_in_grid]]) {                      \
    rms_norm_grad_weight<T>(grad, x, inv_rms, dweight, rows, hidden, column);                             \
  }

INSTANTIATE_NORMS(float, float)
INSTANTIATE_NORMS(half, half)
#if __METAL_VERSION__ >= 310  // bfloat arrived with Metal 3.1 (macOS 14)
INSTANTIATE_NORMS(bfloat, bfloat)
#endif
