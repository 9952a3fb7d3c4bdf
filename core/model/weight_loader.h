// WeightLoader: turns named checkpoint tensors (or deterministic random values,
// for benchmarks) into backend tensors, optionally sharded for tensor
// parallelism. Each rank reads only its own slice of the memory-mapped file.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/safetensors.h"
#include "core/tensor/backend.h"

namespace treespec {

struct ShardSpec {
  int rank = 0;
  int size = 1;
};

// Rows [r0, r1) of tensor `name` whose full shape is `shape`.
struct RowPart {
  std::string name;
  Shape shape;
  int64_t r0 = 0, r1 = 0;
};

class WeightLoader {
 public:
  // Reads from `checkpoint` (not owned).
  WeightLoader(Checkpoint* checkpoint, Backend* backend)
      : checkpoint_(checkpoint), backend_(backend) {}
  // Deterministic pseudo-random weights, uniform in [-scale, scale]; norms are 1.
  WeightLoader(uint64_t seed, float scale, Backend* backend)
      : backend_(backend), seed_(seed), scale_(scale) {}

  bool is_random() const { return checkpoint_ == nullptr; }
  Checkpoint* checkpoint() const { return checkpoint_; }
  Backend* backend() const { return backend_; }

  // The whole tensor.
  absl::StatusOr<Tensor> Load(const std::string& name, const Shape& shape);
  // A norm weight (random mode: all ones).
  absl::StatusOr<Tensor> LoadNorm(const std::string& name, const Shape& shape);
  // Row slices of several [*, K] tensors, concatenated along rows.
  absl::StatusOr<Tensor> LoadRows(const std::vector<RowPart>& parts);
  // The same rows as LoadRows, as the blocks Backend::LinearRowBlocks takes:
  // one fused tensor, or, on a backend that TakesMixedRowBlocks, one block per
  // part (each kept as stored) where the parts' kept dtypes join only by
  // widening to f32 (Backend::FusedWeightDType).
  absl::StatusOr<RowBlocks> LoadRowBlocks(const std::vector<RowPart>& parts);
  // Columns [c0, c1) of a [N, K] tensor.
  absl::StatusOr<Tensor> LoadCols(const std::string& name, const Shape& shape, int64_t c0,
                                  int64_t c1);

 private:
  DType TargetDType(DType stored, size_t rank) const;
  absl::StatusOr<DType> FusedDType(const std::vector<RowPart>& parts,
                                   std::vector<DType>* kept) const;
  absl::Status FillRandom(const std::string& name, Tensor* dst);

  Checkpoint* checkpoint_ = nullptr;
  Backend* backend_;
  uint64_t seed_ = 0;
  float scale_ = 0.02f;
};

}  // namespace treespec
