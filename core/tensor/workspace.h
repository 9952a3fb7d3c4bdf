// Workspace: numbered activation buffers that a model reuses across forward
// passes, grown when a pass needs more and never shrunk, so steady-state steps
// allocate nothing (and CUDA graphs see stable addresses). Not thread-safe.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor/backend.h"

namespace treespec {

class Workspace {
 public:
  explicit Workspace(Backend* backend = nullptr) : backend_(backend) {}
  void set_backend(Backend* backend) { backend_ = backend; }

  // A view of buffer `index` with `shape` (activation dtype).
  absl::StatusOr<Tensor> Get(int index, Shape shape);
  // Every buffer allocated so far (to keep them alive, e.g. in a graph).
  const std::vector<Tensor>& buffers() const { return buffers_; }
  // Drops every buffer (tensors still viewing one keep it alive), so that the
  // next pass allocates exactly what it needs: for measuring that.
  void Release() { buffers_.clear(); }

 private:
  Backend* backend_;
  std::vector<Tensor> buffers_;
};

}  // namespace treespec
