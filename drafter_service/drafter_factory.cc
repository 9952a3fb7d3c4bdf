#include "core/tensor/backend.h"
#include "drafter_service/drafter.h"
#include "drafter_service/model_drafter.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<Drafter>> CreateDrafter(const DrafterOptions& options,
                                                       Backend* backend) {
  auto d = ModelDrafter::Create(options, backend);
  if (!d.ok()) return d.status();
  return std::unique_ptr<Drafter>(std::move(*d));
}

}  // namespace treespec
