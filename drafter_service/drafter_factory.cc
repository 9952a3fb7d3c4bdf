#include "core/tensor/backend.h"
#include "drafter_service/drafter.h"
#include "core/model/config.h"
#include "drafter_service/eagle_drafter.h"
#include "drafter_service/model_drafter.h"
#include "drafter_service/ngram_drafter.h"
#include "drafter_service/redrafter_drafter.h"

namespace treespec {

absl::StatusOr<std::unique_ptr<Drafter>> CreateDrafter(const DrafterOptions& options,
                                                       Backend* backend) {
  if (options.kind == "ngram") {
    DrafterOptions o = options;
    if (o.vocab_size == 0 && !o.model_dir.empty()) {
      auto config = LoadModelConfig(o.model_dir);
      if (!config.ok()) return config.status();
      o.vocab_size = config->vocab_size();
    }
    auto d = NgramDrafter::Create(o);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Drafter>(std::move(*d));
  }
  if (options.kind == "eagle" || options.kind == "eagle3") {
    auto d = EagleDrafter::Create(options, backend);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Drafter>(std::move(*d));
  }
  if (options.kind == "redrafter") {
    auto d = RedrafterDrafter::Create(options, backend);
    if (!d.ok()) return d.status();
    return std::unique_ptr<Drafter>(std::move(*d));
  }
  auto d = ModelDrafter::Create(options, backend);
  if (!d.ok()) return d.status();
  return std::unique_ptr<Drafter>(std::move(*d));
}

}  // namespace treespec
