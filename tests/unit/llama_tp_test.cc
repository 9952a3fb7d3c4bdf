// Tensor-parallel Llama on CPU: each fixture Llama sharded over 2 ranks (two
// threads, each with its own backend, KV cache and Gloo communicator over
// loopback) gives the same logits as one rank, for a prefill and for a tree
// step over the cached prefix; and shapes that do not split are a clear error.
#include <cmath>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/gloo_communicator.h"
#include "core/comm/rendezvous.h"
#include "core/model/llama.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using std::chrono::milliseconds;

// Fixture name, or "configs/<variant>" for the tiny models of
// tests/golden/data/configs (tools/goldens/make_config_goldens.py).
std::string ModelDir(const std::string& name = "tiny_llama_gqa") {
  if (name.rfind("configs/", 0) == 0) return testing::SourceDir() + "/tests/golden/data/" + name;
  return testing::SourceDir() + "/tests/fixtures/models/" + name;
}

// Prefill of a prompt, then a tree over it; returns both passes' logits.
absl::StatusOr<std::vector<std::vector<float>>> RunPasses(Communicator* comm,
                                                          const std::string& name = "tiny_llama_gqa") {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  auto model = LlamaModel::Load(ModelDir(name), backend.get(), comm);
  if (!model.ok()) return model.status();
  auto cache = PagedKvCache::Create((*model)->KvOptions(32, 4), backend.get());
  if (!cache.ok()) return cache.status();
  PagedKvCache* kv = cache->get();
  std::vector<std::vector<float>> out;
  const int64_t seq = kv->CreateSequence();
  if (absl::Status st = kv->Reserve(seq, 64); !st.ok()) return st;
  ForwardOutput fo;
  const int32_t vocab = static_cast<int32_t>((*model)->config().vocab_size);
  std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 127, 64, 3, 8, 21, 77};
  for (int32_t& t : prompt) t %= vocab;
  if (absl::Status st = (*model)->Forward({{seq, prompt, {}, LogitsMode::kAll}}, kv, &fo); !st.ok()) {
    return st;
  }
  out.push_back(fo.logits);
  if (absl::Status st = kv->Commit(seq, static_cast<int64_t>(prompt.size())); !st.ok()) return st;
  // A tree: root 12 with children 30, 31; 30 has child 40; 31 has child 41.
  std::vector<int32_t> tree = {12, 30, 31, 40, 41};
  for (int32_t& t : tree) t %= vocab;
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 2};
  if (absl::Status st = (*model)->Forward({{seq, tree, parents, LogitsMode::kAll}}, kv, &fo); !st.ok()) {
    return st;
  }
  out.push_back(fo.logits);
  return out;
}

// Runs `body(comm)` on `size` threads, one Gloo rank each.
std::vector<absl::StatusOr<std::vector<std::vector<float>>>> OnGlooGroup(
    int size, const std::function<absl::StatusOr<std::vector<std::vector<float>>>(Communicator*)>& body) {
  RendezvousOptions so;
  so.address = "127.0.0.1:0";
  so.size = size;
  auto server = RendezvousServer::Start(so.address, so);
  EXPECT_TRUE(server.ok()) << server.status();
  std::vector<absl::StatusOr<std::vector<std::vector<float>>>> results(
      size, absl::UnknownError("not run"));
  // No rank leaves (closing its connections) before every rank is done: a
  // rank still forming the mesh would see that as a failure.
  std::latch done(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      struct Arrive {
        std::latch* l;
        ~Arrive() { l->arrive_and_wait(); }
      };
      RendezvousOptions o = so;
      o.address = absl::StrCat("127.0.0.1:", (*server)->port());
      o.rank = r;
      auto client = RendezvousClient::Connect(o);
      if (!client.ok()) {
        results[r] = client.status();
        done.count_down();
        return;
      }
      GlooOptions g;
      g.rank = r;
      g.size = size;
      g.comm.timeout = milliseconds(20000);
      auto comm = CreateGlooCommunicator(g, client->get());
      Arrive arrive{&done};
      if (!comm.ok()) {
        results[r] = comm.status();
        return;
      }
      results[r] = body(comm->get());
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// Untied (GQA), tied embeddings with llama3 RoPE scaling, bf16 weights
// (sliced, then widened), a checkpoint sharded over several files; Qwen2
// (q/k/v bias slices), Qwen3 (replicated per-head q/k norms, head_dim 16 !=
// hidden / heads), Llama with attention and MLP biases (o / down biases added
// once after the all-reduce) and Mistral with a sliding window shorter than
// the prompt.
class LlamaTpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaTpTest, TwoRanksMatchOneRank) {
  const std::string name = GetParam();
  auto reference = RunPasses(nullptr, name);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto results = OnGlooGroup(2, [&](Communicator* c) { return RunPasses(c, name); });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    ASSERT_EQ(results[r]->size(), reference->size());
    for (size_t pass = 0; pass < reference->size(); ++pass) {
      const std::vector<float>& want = (*reference)[pass];
      const std::vector<float>& got = (*results[r])[pass];
      ASSERT_EQ(got.size(), want.size()) << "rank " << r << " pass " << pass;
      double max_ref = 0, max_err = 0;
      for (float v : want) max_ref = std::max(max_ref, std::fabs(static_cast<double>(v)));
      for (size_t i = 0; i < want.size(); ++i) {
        const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
        max_err = std::max(max_err, err);
        // Relative to the logit scale: |a - b| <= 1e-5 * max|logit|.
        ASSERT_LE(err, 1e-5 * max_ref)
            << "rank " << r << " pass " << pass << " element " << i
            << ": tp2 " << got[i] << " vs tp1 " << want[i];
      }
      RecordProperty(absl::StrCat("max_rel_err_rank", r, "_pass", pass),
                     std::to_string(max_err / max_ref));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaTpTest,
                         ::testing::Values("tiny_llama_gqa", "tiny_llama3", "tiny_llama_gqa_bf16",
                                           "tiny_llama_gqa_sharded", "configs/qwen2",
                                           "configs/qwen3", "configs/llama_bias",
                                           "configs/mistral_window"));

TEST(LlamaTpErrorsTest, UnevenSplitIsAClearError) {
  // 8 heads, 2 KV heads: 3 ranks cannot split them. Each rank fails on its
  // own, before any collective.
  auto results = OnGlooGroup(3, [](Communicator* c) { return RunPasses(c); });
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_EQ(results[r].status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(results[r].status().message(),
                ::testing::HasSubstr("num_attention_heads (8) is not divisible by tp size 3"));
  }
}

}  // namespace
}  // namespace treespec
