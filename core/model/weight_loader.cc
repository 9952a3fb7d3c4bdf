#include "core/model/weight_loader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace treespec {
namespace {

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

absl::Status WeightLoader::FillRandom(const std::string& name, Tensor* dst) {
  return backend_->FillUniform(dst, FillUniformMix(seed_ ^ HashName(name)), scale_);
}

// Weight matrices (2-D) are kept in the backend's WeightDType for their
// stored dtype (f16, bf16 or quantised blocks on a CPU backend that asks for
// them); everything else in the activation dtype.
DType WeightLoader::TargetDType(DType stored, size_t rank) const {
  return rank == 2 ? backend_->WeightDType(stored) : backend_->activation_dtype();
}

absl::StatusOr<Tensor> WeightLoader::Load(const std::string& name, const Shape& shape) {
  if (is_random()) {
    TS_ASSIGN_OR_RETURN(Tensor t,
                        backend_->Alloc(TargetDType(backend_->activation_dtype(), shape.size()),
                                        shape));
    TS_RETURN_IF_ERROR(FillRandom(name, &t));
    return t;
  }
  TS_ASSIGN_OR_RETURN(const TensorInfo* info, checkpoint_->Find(name, shape));
  const DType target = TargetDType(info->dtype, shape.size());
  const size_t align = IsQuantized(info->dtype) ? 1 : DTypeSize(info->dtype);
  if (target == info->dtype && backend_->CanAliasHost(info->dtype) &&
      reinterpret_cast<uintptr_t>(info->data) % align == 0) {
    return Tensor::HostView(info->dtype, shape, info->data, info->mapping);
  }
  TS_ASSIGN_OR_RETURN(Tensor t, backend_->Alloc(target, shape));
  TS_RETURN_IF_ERROR(backend_->Upload(info->data, info->dtype, &t));
  return t;
}

absl::StatusOr<Tensor> WeightLoader::LoadNorm(const std::string& name, const Shape& shape) {
  if (!is_random()) return Load(name, shape);
  TS_ASSIGN_OR_RETURN(Tensor t, backend_->Alloc(backend_->activation_dtype(), shape));
  std::vector<float> ones(t.numel(), 1.0f);
  TS_RETURN_IF_ERROR(backend_->Upload(ones.data(), DType::kF32, &t));
  return t;
}

// One dtype for a matrix fused from `parts`: their common target, else what
// the backend converts them all to (Backend::FusedWeightDType; a GGUF K-quant
// mix can store q and k as Q5_0 and v as Q8_0). `kept`, when given, gets each
// part's own target.
absl::StatusOr<DType> WeightLoader::FusedDType(const std::vector<RowPart>& parts,
                                               std::vector<DType>* kept) const {
  const size_t rank = parts.at(0).shape.size() > 1 ? 2 : 1;
  DType target = TargetDType(backend_->activation_dtype(), rank);
  if (is_random()) return target;
  for (size_t i = 0; i < parts.size(); ++i) {
    TS_ASSIGN_OR_RETURN(const TensorInfo* info, checkpoint_->Find(parts[i].name, parts[i].shape));
    const DType d = TargetDType(info->dtype, rank);
    if (kept != nullptr) kept->push_back(d);
    target = i == 0 || rank != 2 ? d : backend_->FusedWeightDType(target, d);
  }
  return target;
}

absl::StatusOr<Tensor> WeightLoader::LoadRows(const std::vector<RowPart>& parts) {
  int64_t rows = 0;
  const int64_t K = parts.at(0).shape.size() > 1 ? parts[0].shape[1] : 1;
  for (const RowPart& p : parts) rows += p.r1 - p.r0;
  Shape shape = parts[0].shape.size() > 1 ? Shape{rows, K} : Shape{rows};
  TS_ASSIGN_OR_RETURN(DType target, FusedDType(parts, nullptr));
  TS_ASSIGN_OR_RETURN(Tensor t, backend_->Alloc(target, shape));
  int64_t at = 0;
  for (const RowPart& p : parts) {
    Tensor view = t.Rows(at, at + (p.r1 - p.r0));
    if (is_random()) {
      TS_RETURN_IF_ERROR(FillRandom(absl::StrCat(p.name, "#", p.r0), &view));
    } else {
      TS_ASSIGN_OR_RETURN(HostSlice s, checkpoint_->Slice(p.name, p.shape, p.r0, p.r1, 0, K));
      TS_RETURN_IF_ERROR(backend_->Upload(s.data, s.dtype, &view));
    }
    at += p.r1 - p.r0;
  }
  return t;
}

absl::StatusOr<RowBlocks> WeightLoader::LoadRowBlocks(const std::vector<RowPart>& parts) {
  bool split = false;
  if (!is_random() && parts.size() > 1 && parts[0].shape.size() == 2 &&
      backend_->TakesMixedRowBlocks()) {
    std::vector<DType> kept;
    TS_ASSIGN_OR_RETURN(DType fused, FusedDType(parts, &kept));
    const DType widened = backend_->WeightDType(DType::kF32);
    split = fused == widened &&
            std::any_of(kept.begin(), kept.end(), [&](DType d) { return d != widened; });
  }
  if (!split) {
    TS_ASSIGN_OR_RETURN(Tensor t, LoadRows(parts));
    return RowBlocks{std::move(t)};
  }
  RowBlocks blocks;
  for (const RowPart& p : parts) {
    // A whole tensor may alias the mapped file (Load); a slice is copied.
    absl::StatusOr<Tensor> t =
        p.r0 == 0 && p.r1 == p.shape[0] ? Load(p.name, p.shape) : LoadRows({p});
    if (!t.ok()) return t.status();
    blocks.push_back(*std::move(t));
  }
  return blocks;
}

absl::StatusOr<Tensor> WeightLoader::LoadCols(const std::string& name, const Shape& shape,
                                              int64_t c0, int64_t c1) {
  if (c0 == 0 && c1 == shape[1]) return Load(name, shape);
  if (is_random()) {
    TS_ASSIGN_OR_RETURN(Tensor t, backend_->Alloc(TargetDType(backend_->activation_dtype(), 2),
                                                  {shape[0], c1 - c0}));
    TS_RETURN_IF_ERROR(FillRandom(absl::StrCat(name, "#c", c0), &t));
    return t;
  }
  TS_ASSIGN_OR_RETURN(HostSlice s, checkpoint_->Slice(name, shape, 0, shape[0], c0, c1));
  TS_ASSIGN_OR_RETURN(Tensor t, backend_->Alloc(TargetDType(s.dtype, 2), {shape[0], c1 - c0}));
  TS_RETURN_IF_ERROR(backend_->Upload(s.data, s.dtype, &t));
  return t;
}

}  // namespace treespec
