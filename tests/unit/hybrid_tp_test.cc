// Tensor-parallel Mamba-2 and Bamba on CPU: each fixture sharded over 2 ranks
// (two threads, each with its own backend, model and Gloo communicator over
// loopback), driven through the SequenceModel interface exactly as the
// worker's ranks are (the same operations on every rank), gives the logits of
// one rank within 1e-5 of the logit scale: a prompt, a tree over it, a
// CommitPath (activation replay on each rank's share of the heads), a chain
// after it and a tree grown over two calls in a batch with another sequence.
// tiny_mamba2 splits its 2 groups of B / C over the ranks; tiny_bamba has one
// group, replicated, so the gated norm's sums of squares are all-reduced;
// tiny_mamba2_bias adds in_proj / out_proj biases (the latter added once,
// after the all-reduce) and tied embeddings (vocab-parallel LM head).
// Shapes that do not split are a clear error naming the field.
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
#include "core/model/config.h"
#include "core/model/hybrid.h"
#include "core/model/sequence_model.h"
#include "core/util/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace treespec {
namespace {

using std::chrono::milliseconds;
using Passes = std::vector<std::vector<float>>;

std::string ModelDir(const std::string& name) {
  return testing::SourceDir() + "/tests/fixtures/models/" + name;
}

absl::Status Run(SequenceModel* m, const std::vector<ForwardSeq>& batch, Passes* out) {
  ForwardOutput fo;
  TS_RETURN_IF_ERROR(m->Forward(batch, &fo));
  out->push_back(fo.logits);
  return absl::OkStatus();
}

absl::StatusOr<Passes> RunPasses(Communicator* comm, const std::string& name) {
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  SequenceModelOptions o;
  o.kv_blocks = 32;
  o.kv_block_size = 8;
  o.max_sequences = 4;
  o.max_tail_nodes = 8;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<SequenceModel> m,
                      LoadSequenceModel(ModelDir(name), backend.get(), comm, o));
  Passes out;
  TS_ASSIGN_OR_RETURN(const int64_t a, m->Open(64));
  TS_ASSIGN_OR_RETURN(const int64_t b, m->Open(64));
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 127, 64, 3, 8, 21, 77};
  const std::vector<int32_t> tree = {12, 30, 31, 40, 41}, parents = {-1, 0, 0, 1, 2};
  TS_RETURN_IF_ERROR(Run(m.get(), {{a, prompt, {}, LogitsMode::kAll}, {b, {4, 5}, {}, LogitsMode::kAll}},
                         &out));
  TS_RETURN_IF_ERROR(m->Commit(a, static_cast<int64_t>(prompt.size())));
  TS_RETURN_IF_ERROR(m->Commit(b, 2));
  TS_RETURN_IF_ERROR(Run(m.get(), {{a, tree, parents, LogitsMode::kAll}}, &out));
  TS_RETURN_IF_ERROR(m->CommitPath(a, {0, 2, 4}));
  TS_RETURN_IF_ERROR(Run(m.get(), {{a, {50, 51}, {}, LogitsMode::kAll}}, &out));
  TS_RETURN_IF_ERROR(m->Commit(a, 1));  // part of the chain: replay
  // b grows a tree over two calls, batched with a's chain.
  TS_RETURN_IF_ERROR(Run(m.get(), {{b, {tree[0], tree[1], tree[2]}, {-1, 0, 0}, LogitsMode::kAll}}, &out));
  TS_RETURN_IF_ERROR(Run(m.get(), {{b, {tree[3], tree[4]}, parents, LogitsMode::kAll, 3},
                                   {a, {60}, {}, LogitsMode::kAll}},
                         &out));
  TS_RETURN_IF_ERROR(m->CommitPath(b, {0, 1, 3}));
  TS_RETURN_IF_ERROR(Run(m.get(), {{b, {70}, {}, LogitsMode::kAll}}, &out));
  return out;
}

// Runs `body(comm)` on `size` threads, one Gloo rank each.
std::vector<absl::StatusOr<Passes>> OnGlooGroup(
    int size, const std::function<absl::StatusOr<Passes>(Communicator*)>& body) {
  RendezvousOptions so;
  so.address = "127.0.0.1:0";
  so.size = size;
  auto server = RendezvousServer::Start(so.address, so);
  EXPECT_TRUE(server.ok()) << server.status();
  std::vector<absl::StatusOr<Passes>> results(size, absl::UnknownError("not run"));
  std::latch done(size);  // no rank leaves before every rank is done
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

class HybridTpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridTpTest, TwoRanksMatchOneRank) {
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
        ASSERT_LE(err, 1e-5 * max_ref) << "rank " << r << " pass " << pass << " element " << i
                                       << ": tp2 " << got[i] << " vs tp1 " << want[i];
      }
      RecordProperty(absl::StrCat("max_rel_err_rank", r, "_pass", pass),
                     absl::StrCat(max_err / max_ref));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridTpTest,
                         ::testing::Values("tiny_mamba2", "tiny_bamba", "tiny_bamba_bf16",
                                           "tiny_mamba2_bias"));

TEST(HybridTpErrorsTest, ShapesThatDoNotSplitNameTheField) {
  auto mamba2 = LoadModelConfig(ModelDir("tiny_mamba2"));
  ASSERT_TRUE(mamba2.ok()) << mamba2.status();
  absl::Status st = HybridModel::CheckShardable(mamba2->hybrid, 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("num_heads (8) is not divisible by tp size 3"));
  st = HybridModel::CheckShardable(mamba2->hybrid, 4);  // 8 heads split, 2 groups do not
  EXPECT_THAT(st.message(), ::testing::HasSubstr("n_groups (2) must be 1"));
  auto bamba = LoadModelConfig(ModelDir("tiny_bamba"));
  ASSERT_TRUE(bamba.ok()) << bamba.status();
  EXPECT_TRUE(HybridModel::CheckShardable(bamba->hybrid, 2).ok());
  st = HybridModel::CheckShardable(bamba->hybrid, 4);  // 4 Mamba heads, but 2 KV heads
  EXPECT_THAT(st.message(), ::testing::HasSubstr("num_key_value_heads (2)"));
  // Every rank refuses on its own, before any collective.
  auto results = OnGlooGroup(3, [](Communicator* c) { return RunPasses(c, "tiny_mamba2"); });
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_EQ(results[r].status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace treespec
