// SwiGLU for Apple GPUs: silu_and_mul and its backward, one thread per output element.
// x rows are contiguous [gate | up] halves of `half_width` each (the host prepares them).
#include <metal_stdlib>
using namespace metal;

template <typename T>
void silu_and_mul(device const T* x, device T* out, long half_width, uint index) {
  const long row = long(index) / half_width, col = long(index) % half_width;
  const float a = float(x[row * 2 * half_width + col]);
  const float b = float(x[row * 2 * half_width + half_width + col]);
  out[index] = T(a / (1.0f + exp(-a)) * b);
}

template <typename T>
void silu_and_mul_grad(device const T* grad, device const T* x, device T* dx, long half_width, uint index) {
  const long row = long(index) / half_width, col = long(index) % half_width;
  const long a_at = row * 2 * half_width + col;
  const float g = float(grad[index]);
  const float a = float(x[a_at]), b = float(x[a_at + half_width]);
  const float sigmoid = 1.0f / (1.0f + exp(-a));
  dx[a_at] = T(g * b * sigmoid * (1.0f + a * (1.0f - sigmoid)));
  dx[a_at + half_width] = T(g * a * sigmoid);
}

// One kernel per op and type, named <op>_<type> (float, half, bfloat).
#define INSTANTIATE_ACTIVATIONS(T, NAME)                                                                  \
  kernel void silu_and_mul_##NAME(device const T* x, device T* out, constant long& half_width,           \
                                  uint index [[thread_position_in_grid]]) {                               \
    silu_and_mul<T>(x, out, half_width, index);                                                           \
  }                                                                                                       \
  kernel void silu_and_mul_grad_##NAME(device const T* grad, device const T* x, device T* dx,            \
                                       constant long& half_width, uint index [[thread_position_in_grid]]) { \
    silu_and_mul_grad<T>(grad, x, dx, half_width, index);                                                 \
  }

INSTANTIATE_ACTIVATIONS(float, float)
INSTANTIATE_ACTIVATIONS(half, half)
#if __METAL_VERSION__ >= 310  // bfloat arrived with Metal 3.1 (macOS 14)
INSTANTIATE_ACTIVATIONS(bfloat, bfloat)
#endif
