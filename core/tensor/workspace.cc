#include "core/tensor/workspace.h"

#include <algorithm>

#include "core/util/status_macros.h"

namespace treespec {

absl::StatusOr<Tensor> Workspace::Get(int index, Shape shape) {
  if (static_cast<int>(buffers_.size()) <= index) buffers_.resize(index + 1);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Tensor& b = buffers_[index];
  if (!b.defined() || b.numel() < n) {
    TS_ASSIGN_OR_RETURN(b, backend_->Alloc(backend_->activation_dtype(), {std::max<int64_t>(n, 1)}));
  }
  return b.Prefix(std::move(shape));
}

}  // namespace treespec
