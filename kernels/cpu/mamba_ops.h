// Plain-loop float32 kernels for Mamba's depthwise causal convolution and
// selective scan (Gu & Dao 2023, Alg. 2), in the layout of Hugging Face's
// MambaMixer: conv state [C, K] holds the last K conv inputs, oldest first;
// SSM state [C, N].
#pragma once

#include <cstdint>

namespace treespec::cpu {

// One sequence, L tokens. in: x [L, C], w [C, K], b [C]; inout: state [C, K];
// out: out [L, C] = silu(conv(x) + b).
void MambaConv(const float* x, int L, int C, const float* w, const float* b, int K,
               float* state, float* out);

// in: u, delta, z [L, C], dt_bias [C], A [C, N], Bm, Cm [L, N], D [C];
// inout: state [C, N]; out: y [L, C].
void MambaScan(const float* u, const float* delta, const float* dt_bias, const float* A,
               const float* Bm,
               const float* Cm, const float* D, const float* z, int L, int C, int N,
               float* state, float* y);

float Softplus(float x);

}  // namespace treespec::cpu
