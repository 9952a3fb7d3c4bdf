#include "absl/strings/str_cat.h"
#include "core/tensor/backend.h"
#include "drafter_service/mamba_drafter.h"
#include "drafter_service/transformer_drafter.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<Drafter>> CreateDrafter(const DrafterOptions& options,
                                                       Backend* backend) {
  if (options.kind == "mamba") {
    auto d = MambaDrafter::Create(options, backend);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Drafter>(std::move(*d));
  }
  if (options.kind == "transformer") {
    auto d = TransformerDrafter::Create(options, backend);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Drafter>(std::move(*d));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--kind '", options.kind, "' is not a drafter kind (mamba, transformer)"));
}

}  // namespace treespec
