#include "kernels/cuda/common.cuh"
#include "kernels/cuda/qkv_rope.h"

namespace treespec::cuda {
namespace {

// Work items per token: 0 .. (H + Hkv)·half - 1 rotate one (head, i) pair of
// q or k (columns i and i + half, i < half = Rd / 2); the next
// (H + Hkv)·(Dh - 2·half) copy the unrotated columns of q and k (partial
// rotary); the last Hkv·Dh copy v. Grid x = tokens, grid y = blocks of
// kThreads items, one item per thread: a decode step's one token spreads over
// (H + 2·Hkv)·Dh / 2 / kThreads blocks (a block per token looped 32 times
// per thread over a 7B layer's 8192 items: 21 us of a 5.5 ms step, ncu on an
// H200).
constexpr int kThreads = 256;

template <typename T>
__global__ void QkvRopeKernel(const T* qkv, const int32_t* positions, const float* inv_freq,
                              const int32_t* token_slots, int H, int Hkv, int Dh, int half, T* q,
                              T* k_cache, T* v_cache) {
  const int64_t t = blockIdx.x;
  const T* src = qkv + t * static_cast<int64_t>(H + 2 * Hkv) * Dh;
  const float pos = static_cast<float>(positions[t]);
  const int64_t slot = token_slots[t];
  const int rest = Dh - 2 * half;
  const int num_rot = (H + Hkv) * half;
  const int num_pass = (H + Hkv) * rest;
  const int total = num_rot + num_pass + Hkv * Dh;
  auto dst = [&](int head) {
    return head < H ? q + (t * H + head) * Dh : k_cache + (slot * Hkv + (head - H)) * Dh;
  };
  const int e = blockIdx.y * kThreads + threadIdx.x;
  if (e >= total) return;
  if (e < num_rot) {
    const int head = e / half, i = e % half;
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    const T* x = src + head * Dh;
    const float x1 = ToF(x[i]), x2 = ToF(x[i + half]);
    T* y = dst(head);
    y[i] = FromF<T>(x1 * c - x2 * s);
    y[i + half] = FromF<T>(x2 * c + x1 * s);
  } else if (e < num_rot + num_pass) {
    const int f = e - num_rot;
    const int head = f / rest, d = 2 * half + f % rest;
    dst(head)[d] = src[head * Dh + d];
  } else {
    const int f = e - num_rot - num_pass;
    const int g = f / Dh, d = f % Dh;
    v_cache[(slot * Hkv + g) * Dh + d] = src[(H + Hkv + g) * Dh + d];
  }
}

}  // namespace

cudaError_t LaunchQkvRope(DType dtype, const void* qkv, const int32_t* positions,
                          const float* inv_freq, int rot_half, const int32_t* token_slots,
                          int64_t T, int H, int Hkv, int Dh, void* q, void* k_cache, void* v_cache,
                          cudaStream_t stream) {
  if (rot_half < 0 || 2 * rot_half > Dh) return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  return DispatchFloat(dtype, [&](auto tag) {
    using V = decltype(tag);
    const int items = (H + Hkv) * (Dh - rot_half) + Hkv * Dh;  // the kernel's `total`
    const dim3 grid(static_cast<unsigned>(T),
                    static_cast<unsigned>((items + kThreads - 1) / kThreads));
    QkvRopeKernel<V><<<grid, kThreads, 0, stream>>>(
        static_cast<const V*>(qkv), positions, inv_freq, token_slots, H, Hkv, Dh, rot_half,
        static_cast<V*>(q), static_cast<V*>(k_cache), static_cast<V*>(v_cache));
    return cudaGetLastError();
  });
}

}  // namespace treespec::cuda
