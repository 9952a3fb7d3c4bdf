// The NCCL communicator on one GPU (a single-GPU machine cannot run NCCL with
// two ranks): an NCCL group of size 1 (unique id made by "rank 0", as the
// rendezvous would carry it) runs every collective on device tensors of the
// CUDA backend's stream, and then the worker path itself: a TargetRunner on
// the CUDA backend whose SequenceModel is a GroupLeader sending its step frames
// over NCCL, with the model holding the NCCL communicator, gives the same
// tokens as a plain TargetRunner on the same backend. Skips without a GPU (or
// in a build without CUDA, where the NCCL factory says UNAVAILABLE).
#include <memory>
#include <string>
#include <vector>

#include "core/comm/nccl_communicator.h"
#include "core/model/llama.h"
#include "core/model/llama_sequence_model.h"
#include "core/model/sequence_model.h"
#include "core/tensor/backend.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "worker/group_health.h"
#include "worker/rank_loop.h"
#include "worker/target_runner.h"

namespace treespec {
namespace {

class GpuNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = CreateBackend("cuda");
    if (!backend.ok()) GTEST_SKIP() << "no CUDA device: " << backend.status();
    backend_ = std::move(*backend);
    auto id = CreateNcclUniqueId();
    if (!id.ok()) GTEST_SKIP() << "no NCCL: " << id.status();
    NcclOptions o;
    o.rank = 0;
    o.size = 1;
    o.unique_id = *id;
    o.backend = backend_.get();
    o.comm.timeout = std::chrono::seconds(20);
    auto comm = CreateNcclCommunicator(o);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
  }

  absl::StatusOr<Tensor> Device(const std::vector<float>& values, Shape shape) {
    auto t = backend_->Alloc(backend_->activation_dtype(), std::move(shape));
    if (!t.ok()) return t.status();
    if (absl::Status st = backend_->Upload(values.data(), DType::kF32, &*t); !st.ok()) return st;
    return t;
  }

  std::vector<float> Host(const Tensor& t) {
    std::vector<float> out(t.numel());
    EXPECT_TRUE(backend_->DownloadF32(t, out.data()).ok());
    return out;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(GpuNcclTest, CollectivesOfAGroupOfOne) {
  EXPECT_EQ(comm_->name(), "nccl");
  EXPECT_EQ(comm_->size(), 1);
  auto t = Device({1, 2, 3, 4, 5, 6}, {2, 3});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(comm_->AllReduceSum(&*t).ok()) << comm_->status();
  EXPECT_EQ(Host(*t), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto out = backend_->Alloc(backend_->activation_dtype(), {1, 2, 3});
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(comm_->AllGather(*t, &*out).ok()) << comm_->status();
  EXPECT_EQ(Host(*out), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  std::string bytes = "frame bytes through a device staging buffer";
  const std::string want = bytes;
  ASSERT_TRUE(comm_->Broadcast(bytes.data(), bytes.size(), 0).ok()) << comm_->status();
  EXPECT_EQ(bytes, want);
  ASSERT_TRUE(comm_->Barrier().ok()) << comm_->status();
  const CommStats s = comm_->stats();
  EXPECT_EQ(s.num_calls, 4);
  EXPECT_GT(s.total_ns, 0);
  // A host tensor is a caller bug, not a group failure.
  Tensor host = Tensor::Host(DType::kF32, {4});
  EXPECT_EQ(comm_->AllReduceSum(&host).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm_->status().ok());
}

// Open + greedy Verify steps through a runner; returns every token produced.
std::vector<int32_t> Drive(TargetRunner* runner, int64_t vocab) {
  std::vector<int32_t> tokens;
  OpenSpec open;
  open.id = 7;
  open.prompt = {1, 17, 42, 99, 5, 64};
  std::vector<OpenOutcome> o = runner->Open({open});
  EXPECT_TRUE(o[0].status.ok()) << o[0].status;
  int32_t pending = o[0].first_token;
  tokens.push_back(pending);
  for (uint64_t step = 1; step <= 8; ++step) {
    StepSpec s;
    s.id = 7;
    s.step = step;
    s.tree = TokenTree::Root(pending);
    s.tree.AddNode(0, static_cast<int32_t>((step * 31) % vocab));
    s.tree.AddNode(0, static_cast<int32_t>((step * 31 + 1) % vocab));
    s.tree.AddNode(1, static_cast<int32_t>((step * 17) % vocab));
    std::vector<StepOutcome> r = runner->Verify({s}, nullptr);
    EXPECT_TRUE(r[0].status.ok()) << "step " << step << ": " << r[0].status;
    if (!r[0].status.ok()) break;
    tokens.insert(tokens.end(), r[0].tokens.begin(), r[0].tokens.end());
    pending = r[0].tokens.back();
  }
  return tokens;
}

TEST_F(GpuNcclTest, TargetRunnerThroughTheGroupPath) {
  const std::string dir = testing::SourceDir() + "/tests/fixtures/models/tiny_llama_gqa";
  TargetRunnerOptions options;
  options.max_context = 128;
  options.max_tree_nodes = 16;

  SequenceModelOptions mo;
  mo.kv_blocks = 64;
  auto plain_model = LoadSequenceModel(dir, backend_.get(), nullptr, mo);
  ASSERT_TRUE(plain_model.ok()) << plain_model.status();
  TargetRunner plain(plain_model->get(), options);
  const std::vector<int32_t> want = Drive(&plain, 128);

  auto llama = LlamaModel::Load(dir, backend_.get(), comm_.get());
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ((*llama)->tp_size(), 1);
  auto model = LlamaSequenceModel::Create(std::move(*llama), 64, 16);
  ASSERT_TRUE(model.ok()) << model.status();
  GroupHealth health(1);
  GroupLeader leader(comm_.get(), comm_.get(), model->get(), &health, {});
  TargetRunner runner(&leader, options);
  const std::vector<int32_t> got = Drive(&runner, 128);
  EXPECT_EQ(got, want);
  EXPECT_GE(leader.frames_sent(), 9u) << "one frame per forward pass";
  EXPECT_TRUE(health.ok()) << health.status();
  EXPECT_TRUE(comm_->status().ok()) << comm_->status();
}

}  // namespace
}  // namespace treespec
