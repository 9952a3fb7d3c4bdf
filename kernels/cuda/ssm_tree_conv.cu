#include "kernels/cuda/common.cuh"
#include "kernels/cuda/for_each.cuh"
#include "kernels/cuda/ssm_tree_conv.h"
#include "kernels/cuda/ssm_tree_math.h"

namespace treespec::cuda {

cudaError_t LaunchSsmTreeConv(DType dtype, const void* x, int64_t Cd, const void* w,
                              const void* b, const ssm::ConvIndex& ix, void* states, void* out,
                              cudaStream_t stream) {
  if (ix.K < 1) return cudaErrorInvalidValue;
  return DispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    ssm::ConvArgs<T> a;
    a.x = static_cast<const T*>(x);
    a.w = static_cast<const T*>(w);
    a.b = static_cast<const T*>(b);
    a.states = static_cast<T*>(states);
    a.out = static_cast<T*>(out);
    a.Cd = Cd;
    a.ix = ix;
    return ssm::RunConv(a, [&](int64_t n, const auto& op) { return ForEach(n, op, stream); });
  });
}

}  // namespace treespec::cuda
