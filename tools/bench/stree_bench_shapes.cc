#include "tools/bench/stree_bench_shapes.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model/weight_loader.h"
#include "core/spec/tree_shape.h"
#include "core/util/status_macros.h"

namespace treespec::bench {
namespace {

// Mamba-2 mixer of `heads` x 64 (expand 2 at hidden = 32·heads), one group, conv 4.
HybridConfig Mamba2Shape(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads,
                         int64_t state) {
  HybridConfig c;
  c.layout = HybridConfig::Layout::kMamba2;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.tie_word_embeddings = true;
  c.attention.assign(layers, false);
  c.ssm_heads = heads;
  c.ssm_head_dim = 64;
  c.ssm_state = state;
  c.ssm_groups = 1;
  c.conv_kernel = 4;
  return c;
}

// BambaForCausalLM: the Mamba-2 layers above, attention at `attention_layers`
// (partial rotary: half of each head), a SwiGLU MLP after every layer.
HybridConfig BambaShape(HybridConfig c, const std::vector<int64_t>& attention_layers,
                        int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn) {
  c.layout = HybridConfig::Layout::kBamba;
  c.has_mlp = true;
  for (int64_t l : attention_layers) c.attention[l] = true;
  LlamaConfig& a = c.attn;
  a.vocab_size = c.vocab_size;
  a.hidden_size = c.hidden_size;
  a.num_layers = c.num_layers;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.rotary_dim = head_dim / 2;
  a.intermediate_size = ffn;
  a.rms_norm_eps = c.norm_eps;
  a.max_position_embeddings = 4096;
  a.tie_word_embeddings = c.tie_word_embeddings;
  return c;
}

}  // namespace

std::string BenchModel::Describe() const {
  const HybridConfig& c = config;
  std::string s = absl::StrCat(
      c.layout == HybridConfig::Layout::kMamba2 ? "Mamba2ForCausalLM" : "BambaForCausalLM", ", ",
      c.NumParameters() / 1e6, "M parameters", dir.empty() ? " (random weights)" : "", ", ",
      c.num_layers, " layers (", c.num_attention_layers(), " attention), hidden ", c.hidden_size,
      ", vocab ", c.vocab_size, ", SSM ", c.ssm_heads, " heads x ", c.ssm_head_dim, ", d_state ",
      c.ssm_state, ", n_groups ", c.ssm_groups);
  if (c.num_attention_layers() > 0) {
    absl::StrAppend(&s, ", attention ", c.attn.num_heads, " heads (", c.attn.num_kv_heads,
                    " kv) x ", c.attn.head_dim, ", MLP ", c.attn.intermediate_size);
  }
  return s;
}

absl::StatusOr<BenchModel> ParseBenchModel(const std::string& name) {
  BenchModel m;
  m.name = name;
  if (absl::StrContains(name, '/')) {
    TS_ASSIGN_OR_RETURN(ModelConfig mc, LoadModelConfig(name));
    if (mc.arch != Architecture::kMamba2 && mc.arch != Architecture::kHybrid) {
      return absl::InvalidArgumentError(absl::StrCat("--models: ", name, " holds a ",
                                                     mc.architecture_name,
                                                     ", not a Mamba-2 or hybrid model"));
    }
    m.dir = name;
    m.config = mc.hybrid;
    return m;
  }
  if (name == "mamba2-demo") {
    m.config = Mamba2Shape(2048, 256, 8, 8, 64);
  } else if (name == "bamba-demo") {
    m.config = BambaShape(Mamba2Shape(2048, 256, 8, 8, 64), {3, 7}, 8, 4, 32, 768);
    m.config.tie_word_embeddings = m.config.attn.tie_word_embeddings = false;
  } else if (name == "mamba2-130m") {  // state-spaces/mamba2-130m
    m.config = Mamba2Shape(50280, 768, 24, 24, 128);
  } else if (name == "bamba-136m") {
    m.config = BambaShape(Mamba2Shape(50280, 768, 12, 24, 128), {5, 11}, 12, 4, 64, 2048);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--models: unknown model \"", name,
                     "\" (mamba2-demo, bamba-demo, mamba2-130m, bamba-136m or a directory)"));
  }
  return m;
}

absl::StatusOr<std::unique_ptr<HybridModel>> BuildModel(const BenchModel& model,
                                                        Backend* backend) {
  if (!model.dir.empty()) return HybridModel::Load(model.dir, backend);
  WeightLoader loader(/*seed=*/7, /*scale=*/0.02f, backend);
  return HybridModel::Create(model.config, &loader, nullptr);
}

int64_t BenchTree::unrolled_tokens() const {
  int64_t n = 0;
  for (const auto& b : branches) n += static_cast<int64_t>(b.size());
  return n;
}

absl::StatusOr<BenchTree> ParseBenchTree(const std::string& spec) {
  std::vector<int32_t> fanouts;
  if (absl::StartsWith(spec, "binary:")) {
    int32_t levels = 0;
    if (!absl::SimpleAtoi(spec.substr(7), &levels) || levels < 1 || levels > 10) {
      return absl::InvalidArgumentError(
          absl::StrCat("--trees: \"", spec, "\": binary:D needs D levels in [1, 10]"));
    }
    fanouts.assign(levels - 1, 2);
  } else {
    TS_ASSIGN_OR_RETURN(TreeShape shape, TreeShape::Parse(spec));
    fanouts = shape.fanouts();
  }
  BenchTree t;
  t.name = spec;
  t.parents = {-1};
  t.depth = static_cast<int32_t>(fanouts.size()) + 1;
  std::vector<int32_t> level = {0};
  for (int32_t n : fanouts) {  // level by level, children in order, as the drafters add them
    std::vector<int32_t> next;
    for (int32_t parent : level) {
      for (int32_t c = 0; c < n; ++c) {
        next.push_back(static_cast<int32_t>(t.parents.size()));
        t.parents.push_back(parent);
      }
    }
    level = std::move(next);
  }
  for (int32_t leaf : level) {
    std::vector<int32_t> path;
    for (int32_t v = leaf; v >= 0; v = t.parents[v]) path.insert(path.begin(), v);
    t.branches.push_back(std::move(path));
  }
  return t;
}

}  // namespace treespec::bench
