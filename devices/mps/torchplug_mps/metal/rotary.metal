// Rotary position embedding (neox layout) for Apple GPUs: one thread per rotated pair.
// x is a contiguous [tokens, heads, head_dim]; cos and sin are contiguous float32 [tokens, head_dim / 2].
#include <metal_stdlib>
using namespace metal;

template <typename T>
void rotary_embedding(device const T* x, device const float* cos_, device const float* sin_, device T* out, long heads,
                      long half_dim, uint index) {
  const long pair = long(index) % half_dim;
  const long token = long(index) / (heads * half_dim);
  const long first = (long(index) / half_dim) * 2 * half_dim + pair;  // x[token, head, pair]
  const float c = cos_[token * half_dim + pair], s = sin_[token * half_dim + pair];
  const float x1 = float(x[first]), x2 = float(x[first + half_dim]);
  out[first] = T(x1 * c - x2 * s);
  out[first + half_dim] = T(x2 * c + x1 * s);
}

// One kernel per type, named rotary_embedding_<type> (float, half, bfloat).
#define INSTANTIATE_ROTARY(T, NAME)                                                                       \
  kernel void rotary_embedding_##NAME(device const T* x, device const float* cos_, device const float* sin_, \
                                      device T* out, constant long& heads, constant long& half_dim,       \
                                      uint index [[thread_position_in_grid]]) {                           \
    rotary_embedding<T>(x, cos_, sin_, out, heads, half_dim, index);                                      \
  }

INSTANTIATE_ROTARY(float, float)
INSTANTIATE_ROTARY(half, half)
#if __METAL_VERSION__ >= 310  // bfloat arrived with Metal 3.1 (macOS 14)
INSTANTIATE_ROTARY(bfloat, bfloat)
#endif
