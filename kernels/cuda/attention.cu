// Paged attention with tree masks on CUDA cores, fp32 arithmetic.
//
// A block (1 to 4 warps) takes one AttentionItem for one kv head: up to RB
// query rows that share K/V. Every warp keeps the block's RB rows and walks
// its own 32-key chunks of the item's key range (warp w takes chunks w,
// w + num_warps, ...): it stages the chunk's K and V rows (gathered through
// the block table) in its own shared memory, lane l scores key l against all
// RB rows, and the chunk is folded into a running max m, sum l and output o
// per row (online softmax, Milakov & Gimelshein 2018; FlashAttention's
// rescaling). A key at position p < context_len is visible to every row; tail
// column j (position context_len + j: prior tokens, then new ones) is visible
// to the row of new token i iff the plan's mask says so (causal j <= prior +
// i, or the ancestor-or-self bit of a token tree: paper 002 Sec. 3, paper 000
// Sec. 4.1). Because a row's result is a function of the
// visible keys only, tree nodes, chain tokens and decoded tokens share one
// code path. At the end the warps merge their (m, l, o) through shared
// memory; an item that is one of several splits of a long key range writes
// (m, l, o) to a partial buffer that CombineKernel merges the same way.
#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"

namespace treespec::cuda {
namespace {

constexpr int kChunk = 32;          // keys per warp step: one per lane
constexpr int kMinSplitKeys = 128;  // no split shorter than one chunk per warp

struct KernelParams {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  void* out;
  const int32_t* query_start;
  const int32_t* context_lens;
  const int32_t* prior_lens;
  const int32_t* block_tables;
  const int32_t* mask_offset;
  const uint64_t* mask_words;
  int max_blocks, block_size, H, Hkv, group, Dh, Dh_pad;
  float scale;
  const AttentionItem* items;
  float* partials;
};

template <int kBytes>
struct RawVec;
template <>
struct RawVec<2> {
  using type = uint16_t;
};
template <>
struct RawVec<4> {
  using type = uint32_t;
};
template <>
struct RawVec<8> {
  using type = uint2;
};
template <>
struct RawVec<16> {
  using type = uint4;
};

// 16 bytes global -> shared without a register (cp.async, sm_80+); both
// addresses 16-byte aligned. Complete after CopyAsyncWaitAll in this thread.
__device__ __forceinline__ void CopyAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CopyAsyncWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Loads N consecutive elements (N · sizeof(T) in 2 .. 32 bytes, aligned) as floats.
template <typename T, int N>
__device__ __forceinline__ void LoadF(const T* p, float* f) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes > 16) {
    LoadF<T, N / 2>(p, f);
    LoadF<T, N / 2>(p + N / 2, f + N / 2);
  } else {
    using R = typename RawVec<kBytes>::type;
    const R raw = *reinterpret_cast<const R*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < N; ++j) f[j] = ToF(e[j]);
  }
}

template <typename T, int RB, int VW>
__global__ void __launch_bounds__(128) AttentionKernel(KernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kN = 16 / sizeof(T);  // elements per 16-byte access
  const int num_warps = blockDim.x >> 5;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const AttentionItem item = p.items[blockIdx.x];
  const int g = blockIdx.y;
  const int s = item.seq;
  const int q0 = p.query_start[s];
  const int n_new = p.query_start[s + 1] - q0;
  const int ctx = p.context_lens[s];
  const int prior = p.prior_lens[s];
  const int rows = n_new * p.group;
  const int Dh = p.Dh, Dh_pad = p.Dh_pad;
  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);

  // Shared memory: q [RB, Dh] f32 | per warp K, V [32, Dh_pad] | per warp p [RB, 32] f32.
  float* q_s = reinterpret_cast<float*>(smem);
  T* kv_s = reinterpret_cast<T*>(smem + RB * Dh * sizeof(float));
  T* K_s = kv_s + static_cast<size_t>(warp) * 2 * kChunk * Dh_pad;
  T* V_s = K_s + kChunk * Dh_pad;
  float* p_s = reinterpret_cast<float*>(kv_s + static_cast<size_t>(num_warps) * 2 * kChunk * Dh_pad) +
               warp * RB * kChunk;

  for (int e = threadIdx.x; e < RB * Dh; e += blockDim.x) {
    const int r = e / Dh, d = e - r * Dh;
    const int row = item.row0 + r;
    float v = 0.0f;
    if (row < rows) {
      const int i = row / p.group, h = g * p.group + row % p.group;
      v = ToF(static_cast<const T*>(p.q)[(static_cast<int64_t>(q0 + i) * p.H + h) * Dh + d]);
    }
    q_s[e] = v;
  }
  __syncthreads();

  int tok[RB];
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    const int row = item.row0 + r;
    tok[r] = row < rows ? row / p.group : -1;
  }
  const int moff = p.mask_offset[s];
  const int words = (prior + n_new + 63) >> 6;
  const uint64_t* mask = moff >= 0 ? p.mask_words + moff : nullptr;
  const int32_t* bt = p.block_tables + static_cast<int64_t>(s) * p.max_blocks;
  const int cpr = Dh / kN;
  const int d0 = lane * VW;

  float m[RB], l[RB], o[RB][VW];
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < VW; ++j) o[r][j] = 0.0f;
  }

  for (int c0 = item.key_begin + warp * kChunk; c0 < item.key_end; c0 += num_warps * kChunk) {
    const int kn = min(kChunk, item.key_end - c0);
    const int pos = c0 + lane;
    int64_t my_slot = 0;
    if (lane < kn) {
      my_slot = static_cast<int64_t>(bt[pos / p.block_size]) * p.block_size + pos % p.block_size;
    }
    // Asynchronous copies, all of the chunk's in flight at once, then one
    // wait (a copy through registers kept two loads a lane in flight: 16
    // round trips to HBM a chunk for Dh 128, 17 us a 7B layer's decode
    // attention on an H200).
    for (int e = lane; e < kChunk * cpr; e += 32) {
      const int kr = e / cpr, cc = e - kr * cpr;
      const int64_t slot = __shfl_sync(0xffffffffu, my_slot, kr);
      if (kr < kn) {
        const int64_t off = (slot * p.Hkv + g) * Dh + cc * kN;
        CopyAsync16(K_s + kr * Dh_pad + cc * kN, kc + off);
        CopyAsync16(V_s + kr * Dh_pad + cc * kN, vc + off);
      }
    }
    CopyAsyncWaitAll();
    __syncwarp();

    float sc[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) sc[r] = 0.0f;
    const T* krow = K_s + lane * Dh_pad;
    for (int d = 0; d < Dh; d += kN) {
      float kf[kN];
      LoadF<T, kN>(krow + d, kf);
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const float* qr = q_s + r * Dh + d;
#pragma unroll
        for (int j = 0; j < kN; j += 4) {
          const float4 qv = *reinterpret_cast<const float4*>(qr + j);
          sc[r] += qv.x * kf[j] + qv.y * kf[j + 1] + qv.z * kf[j + 2] + qv.w * kf[j + 3];
        }
      }
    }

#pragma unroll
    for (int r = 0; r < RB; ++r) {
      bool vis = lane < kn && tok[r] >= 0;
      if (vis && pos >= ctx) {
        const int j = pos - ctx;
        vis = mask != nullptr
                  ? ((mask[static_cast<int64_t>(tok[r]) * words + (j >> 6)] >> (j & 63)) & 1ull) != 0
                  : j <= prior + tok[r];
      }
      const float x = vis ? sc[r] * p.scale : -INFINITY;
      const float m_new = fmaxf(m[r], WarpMax(x));
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = expf(m[r] - base);
      const float pr = expf(x - base);
      l[r] = l[r] * alpha + pr;
#pragma unroll
      for (int j = 0; j < VW; ++j) o[r][j] *= alpha;
      m[r] = m_new;
      p_s[r * kChunk + lane] = pr;
    }
    __syncwarp();

    if (d0 < Dh) {
      for (int k = 0; k < kn; ++k) {
        float vf[VW];
        LoadF<T, VW>(V_s + k * Dh_pad + d0, vf);
#pragma unroll
        for (int r = 0; r < RB; ++r) {
          const float pk = p_s[r * kChunk + k];
#pragma unroll
          for (int j = 0; j < VW; ++j) o[r][j] += pk * vf[j];
        }
      }
    }
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < RB; ++r) l[r] = WarpSum(l[r]);
  __syncthreads();  // every warp is done with its K/V: reuse that space
  float* comb = reinterpret_cast<float*>(kv_s);
  const int stride = Dh + 2;
#pragma unroll
  for (int r = 0; r < RB; ++r) {
    float* c = comb + (warp * RB + r) * stride;
    if (lane == 0) {
      c[0] = m[r];
      c[1] = l[r];
    }
    if (d0 < Dh) {
#pragma unroll
      for (int j = 0; j < VW; ++j) c[2 + d0 + j] = o[r][j];
    }
  }
  __syncthreads();

  for (int e = threadIdx.x; e < RB * Dh; e += blockDim.x) {
    const int r = e / Dh, d = e - r * Dh;
    const int row = item.row0 + r;
    if (row >= rows) continue;
    float M = -INFINITY;
    for (int w = 0; w < num_warps; ++w) M = fmaxf(M, comb[(w * RB + r) * stride]);
    float L = 0.0f, O = 0.0f;
    if (M != -INFINITY) {
      for (int w = 0; w < num_warps; ++w) {
        const float* c = comb + (w * RB + r) * stride;
        const float f = expf(c[0] - M);
        L += c[1] * f;
        O += c[2 + d] * f;
      }
    }
    if (item.partial < 0) {
      const int i = row / p.group, h = g * p.group + row % p.group;
      static_cast<T*>(p.out)[(static_cast<int64_t>(q0 + i) * p.H + h) * Dh + d] = FromF<T>(O / L);
    } else {
      float* pp = p.partials + ((static_cast<int64_t>(item.partial) * p.Hkv + g) * RB + r) * stride;
      if (d == 0) {
        pp[0] = M;
        pp[1] = L;
      }
      pp[2 + d] = O;
    }
  }
}

// Merges the partial (m, l, o) of the splits of one row block: grid (row
// blocks, kv heads, RB rows), one thread per output element (r, d), the
// splits' loads unrolled so several are in flight (a block of 128 threads
// looping over a row block's RB·Dh elements, each waiting on its splits' loads
// in turn, took 26 us a 7B layer for 16 rows, 6.5 us for one, on an H200).
template <typename T>
__global__ void CombineKernel(const AttentionGroup* groups, const float* partials,
                              const int32_t* query_start, int H, int Hkv, int group, int Dh,
                              int RB, T* out) {
  const AttentionGroup gr = groups[blockIdx.x];
  const int g = blockIdx.y, r = blockIdx.z, d = threadIdx.x;
  const int q0 = query_start[gr.seq];
  const int rows = (query_start[gr.seq + 1] - q0) * group;
  const int row = gr.row0 + r;
  if (d >= Dh || row >= rows) return;
  const int stride = Dh + 2;
  auto part = [&](int k) {
    return partials + ((static_cast<int64_t>(gr.first + k) * Hkv + g) * RB + r) * stride;
  };
  float M = -INFINITY;
#pragma unroll 4
  for (int k = 0; k < gr.num_splits; ++k) M = fmaxf(M, part(k)[0]);
  float L = 0.0f, O = 0.0f;
#pragma unroll 4
  for (int k = 0; k < gr.num_splits; ++k) {
    const float* c = part(k);
    if (c[0] == -INFINITY) continue;
    const float f = expf(c[0] - M);
    L += c[1] * f;
    O += c[2 + d] * f;
  }
  const int i = row / group, h = g * group + row % group;
  out[(static_cast<int64_t>(q0 + i) * H + h) * Dh + d] = FromF<T>(O / L);
}

template <typename T, int RB, int VW>
cudaError_t Run(const AttentionArgs& a, cudaStream_t stream) {
  constexpr int kN = 16 / sizeof(T);
  constexpr int kPeriod = 128 / sizeof(T);
  KernelParams p;
  p.q = a.q;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.out = a.out;
  p.query_start = a.query_start;
  p.context_lens = a.context_lens;
  p.prior_lens = a.prior_lens;
  p.block_tables = a.block_tables;
  p.mask_offset = a.mask_offset;
  p.mask_words = a.mask_words;
  p.max_blocks = a.max_blocks_per_seq;
  p.block_size = a.block_size;
  p.H = a.H;
  p.Hkv = a.Hkv;
  p.group = a.H / a.Hkv;
  p.Dh = a.Dh;
  // Row stride ≡ 16 bytes (mod 128): the 16-byte accesses of 8 lanes to 8
  // different rows hit 32 different banks.
  p.Dh_pad = (a.Dh - kN + kPeriod - 1) / kPeriod * kPeriod + kN;
  p.scale = a.scale;
  p.items = a.items;
  p.partials = a.partials;
  auto smem_bytes = [&](int nw) {
    return static_cast<size_t>(RB) * a.Dh * sizeof(float) +
           static_cast<size_t>(nw) *
               (2 * kChunk * static_cast<size_t>(p.Dh_pad) * sizeof(T) + RB * kChunk * sizeof(float));
  };
  int nw = 4;
  while (nw > 1 && smem_bytes(nw) > static_cast<size_t>(a.max_smem_bytes)) nw /= 2;
  const size_t bytes = smem_bytes(nw);
  if (bytes > static_cast<size_t>(a.max_smem_bytes)) return cudaErrorInvalidConfiguration;
  if (bytes > 48 * 1024) {
    cudaError_t err = cudaFuncSetAttribute(AttentionKernel<T, RB, VW>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes));
    if (err != cudaSuccess) return err;
  }
  AttentionKernel<T, RB, VW><<<dim3(a.num_items, a.Hkv), nw * 32, bytes, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || a.num_groups == 0) return err;
  CombineKernel<T><<<dim3(a.num_groups, a.Hkv, RB), (a.Dh + 31) / 32 * 32, 0, stream>>>(
      a.groups, a.partials, a.query_start, a.H, a.Hkv, p.group, a.Dh, RB,
      static_cast<T*>(a.out));
  return cudaGetLastError();
}

// Instantiated for VW (output dims per lane) 2, 4, 8 and RB (rows per
// block) 1, 4, 8 only, to keep compile time down: head_dim <= 64 uses VW 2,
// and 2-row blocks run as 4-row ones.
template <typename T, int RB>
cudaError_t DispatchVw(const AttentionArgs& a, int vw, cudaStream_t stream) {
  switch (vw) {
    case 2:
      return Run<T, RB, 2>(a, stream);
    case 4:
      return Run<T, RB, 4>(a, stream);
    default:
      return Run<T, RB, 8>(a, stream);
  }
}

}  // namespace

AttentionWork PlanAttentionWork(const AttentionBatch& batch, int group, int Hkv, int num_sms) {
  AttentionWork work;
  int max_rows = 1;
  for (int s = 0; s < batch.num_seqs; ++s) max_rows = std::max(max_rows, batch.num_new(s) * group);
  const int rb = max_rows <= 1 ? 1 : (max_rows <= 4 ? 4 : 8);
  work.rows_per_block = rb;
  struct RowBlock {
    int seq, row0, keys;
  };
  std::vector<RowBlock> blocks;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int n = batch.num_new(s);
    for (int row0 = 0; row0 < n * group; row0 += rb) {
      const int last_token = std::min(n - 1, (row0 + rb - 1) / group);
      const int prior = batch.prior_lens.empty() ? 0 : batch.prior_lens[s];
      blocks.push_back({s, row0, batch.context_lens[s] + prior + last_token + 1});
    }
  }
  const int64_t base = static_cast<int64_t>(blocks.size()) * Hkv;
  const int64_t target = 2 * static_cast<int64_t>(std::max(num_sms, 1));
  const int64_t want = base >= target || base == 0 ? 1 : (target + base - 1) / base;
  for (const RowBlock& b : blocks) {
    int64_t splits = std::min<int64_t>(want, (b.keys + kMinSplitKeys - 1) / kMinSplitKeys);
    int len = b.keys;
    if (splits > 1) {
      len = static_cast<int>((b.keys + splits - 1) / splits);
      len = (len + kChunk - 1) / kChunk * kChunk;
      splits = (b.keys + len - 1) / len;
    }
    if (splits <= 1) {
      work.items.push_back({b.seq, b.row0, 0, b.keys, -1});
      continue;
    }
    work.groups.push_back({b.seq, b.row0, work.num_partials, static_cast<int32_t>(splits)});
    for (int64_t k = 0; k < splits; ++k) {
      const int begin = static_cast<int>(k * len);
      work.items.push_back({b.seq, b.row0, begin, std::min(b.keys, begin + len), work.num_partials++});
    }
  }
  return work;
}

size_t AttentionPartialFloats(const AttentionWork& work, int Hkv, int Dh) {
  return static_cast<size_t>(work.num_partials) * Hkv * work.rows_per_block * (Dh + 2);
}

cudaError_t LaunchAttention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_items == 0) return cudaSuccess;
  if (a.Hkv <= 0 || a.H % a.Hkv != 0 || a.Dh <= 0 || a.Dh > 256) return cudaErrorInvalidValue;
  return DispatchFloat(a.dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    constexpr int kN = 16 / sizeof(T);
    int vw = 2;
    while (32 * vw < a.Dh) vw *= 2;
    const bool aligned = reinterpret_cast<uint64_t>(a.k_cache) % 16 == 0 &&
                         reinterpret_cast<uint64_t>(a.v_cache) % 16 == 0;
    if (a.Dh % kN != 0 || a.Dh % vw != 0 || !aligned) return cudaErrorInvalidValue;
    switch (a.rows_per_block) {
      case 1:
        return DispatchVw<T, 1>(a, vw, stream);
      case 4:
        return DispatchVw<T, 4>(a, vw, stream);
      default:
        return DispatchVw<T, 8>(a, vw, stream);
    }
  });
}

}  // namespace treespec::cuda
