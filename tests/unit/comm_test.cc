// Communicators and rendezvous on loopback: real Gloo collectives between
// threads (each thread one rank, each with its own store client), timeouts
// that become Status instead of hangs, the rendezvous client's bounded
// retries, and the liveness sessions that tell rank 0 which rank is gone.
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/communicator.h"
#include "core/comm/gloo_communicator.h"
#include "core/comm/nccl_communicator.h"
#include "core/comm/rendezvous.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace treespec {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

RendezvousOptions StoreOptions(int port, int rank, int size) {
  RendezvousOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.rank = rank;
  o.size = size;
  o.connect_timeout = milliseconds(5000);
  o.liveness_timeout = milliseconds(1000);
  o.ping_interval = milliseconds(100);
  return o;
}

// A store server plus, per rank, a client and a Gloo communicator.
class GlooGroup {
 public:
  explicit GlooGroup(int size, milliseconds timeout = milliseconds(5000)) : size_(size) {
    auto server = RendezvousServer::Start("127.0.0.1:0", StoreOptions(0, 0, size));
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    clients_.resize(size);
    comms_.resize(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([this, r, timeout] {
        auto client = RendezvousClient::Connect(StoreOptions(server_->port(), r, size_));
        ASSERT_TRUE(client.ok()) << client.status();
        clients_[r] = std::move(*client);
        GlooOptions g;
        g.rank = r;
        g.size = size_;
        g.comm.timeout = timeout;
        g.connect_timeout = milliseconds(5000);
        auto comm = CreateGlooCommunicator(g, clients_[r].get());
        ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status();
        comms_[r] = std::move(*comm);
      });
    }
    for (std::thread& t : threads) t.join();
  }

  bool ok() const {
    for (const auto& c : comms_) {
      if (c == nullptr) return false;
    }
    return true;
  }
  Communicator* comm(int r) { return comms_[r].get(); }

  // Runs body(rank) on one thread per rank.
  void OnEveryRank(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r) threads.emplace_back(body, r);
    for (std::thread& t : threads) t.join();
  }

  void Kill(int r) {
    comms_[r].reset();
    clients_[r].reset();
  }

 private:
  int size_;
  std::unique_ptr<RendezvousServer> server_;
  std::vector<std::unique_ptr<RendezvousClient>> clients_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

TEST(GlooCommTest, AllReduceAllGatherBroadcastBarrier) {
  constexpr int kSize = 3;
  GlooGroup group(kSize);
  ASSERT_TRUE(group.ok());
  group.OnEveryRank([&](int r) {
    Communicator* c = group.comm(r);
    EXPECT_EQ(c->rank(), r);
    EXPECT_EQ(c->size(), kSize);
    // All-reduce: element i of rank r is r * 10 + i; the sum is 30 + 3i.
    Tensor t = Tensor::Host(DType::kF32, {2, 5});
    for (int i = 0; i < 10; ++i) t.data<float>()[i] = static_cast<float>(r * 10 + i);
    ASSERT_TRUE(c->AllReduceSum(&t).ok()) << "rank " << r;
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(t.data<float>()[i], 30.0f + 3 * i) << "rank " << r << " element " << i;
    }
    // All-gather: rank r contributes {r, r + 0.5}; the output is rank-major.
    Tensor in = Tensor::Host(DType::kF32, {2});
    in.data<float>()[0] = static_cast<float>(r);
    in.data<float>()[1] = r + 0.5f;
    Tensor out = Tensor::Host(DType::kF32, {kSize, 2});
    ASSERT_TRUE(c->AllGather(in, &out).ok()) << "rank " << r;
    for (int k = 0; k < kSize; ++k) {
      EXPECT_EQ(out.data<float>()[2 * k], static_cast<float>(k)) << "rank " << r << " block " << k;
      EXPECT_EQ(out.data<float>()[2 * k + 1], k + 0.5f) << "rank " << r << " block " << k;
    }
    // Broadcast from rank 1 (bytes, not a tensor).
    std::string msg = r == 1 ? std::string("hello from one") : std::string(14, '?');
    ASSERT_TRUE(c->Broadcast(msg.data(), msg.size(), /*root=*/1).ok()) << "rank " << r;
    EXPECT_EQ(msg, "hello from one") << "rank " << r;
    EXPECT_TRUE(c->Barrier().ok()) << "rank " << r;
    CommStats s = c->stats();
    EXPECT_EQ(s.num_calls, 4) << "rank " << r;
    EXPECT_GT(s.total_ns, 0) << "rank " << r;
    EXPECT_EQ(s.bytes, 40 + 8 + 14) << "rank " << r;
  });
}

TEST(GlooCommTest, RejectsWhatGlooCannotReduce) {
  GlooGroup group(2);
  ASSERT_TRUE(group.ok());
  Tensor ints = Tensor::Host(DType::kI32, {4});
  absl::Status st = group.comm(0)->AllReduceSum(&ints);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(group.comm(0)->status().ok()) << "a rejected call is not a group failure";
}

TEST(GlooCommTest, PeerThatNeverJoinsTimesOut) {
  auto server = RendezvousServer::Start("127.0.0.1:0", StoreOptions(0, 0, 2));
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = RendezvousClient::Connect(StoreOptions((*server)->port(), 0, 2));
  ASSERT_TRUE(client.ok()) << client.status();
  GlooOptions g;
  g.rank = 0;
  g.size = 2;
  g.connect_timeout = milliseconds(700);
  const Clock::time_point t0 = Clock::now();
  auto comm = CreateGlooCommunicator(g, client->get());
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("rank 1"));
  EXPECT_LT(Seconds(t0), 5.0);
}

TEST(GlooCommTest, CollectiveTimeoutIsAStatusAndSticky) {
  GlooGroup group(2, /*timeout=*/milliseconds(500));
  ASSERT_TRUE(group.ok());
  // Rank 1 never enters the all-reduce.
  Tensor t = Tensor::Host(DType::kF32, {8});
  const Clock::time_point t0 = Clock::now();
  absl::Status st = group.comm(0)->AllReduceSum(&t);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_THAT(st.message(), HasSubstr("gloo"));
  EXPECT_LT(Seconds(t0), 3.0);
  // Sticky: the group is in an unknown state now.
  EXPECT_EQ(group.comm(0)->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(group.comm(0)->Barrier().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(GlooCommTest, PeerThatGoesAwayFailsTheCollective) {
  GlooGroup group(2, /*timeout=*/milliseconds(3000));
  ASSERT_TRUE(group.ok());
  group.Kill(1);
  Tensor t = Tensor::Host(DType::kF32, {8});
  const Clock::time_point t0 = Clock::now();
  absl::Status st = group.comm(0)->AllReduceSum(&t);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(st.code() == absl::StatusCode::kUnavailable ||
              st.code() == absl::StatusCode::kDeadlineExceeded)
      << st;
  EXPECT_LT(Seconds(t0), 6.0);
}

TEST(SingleRankCommTest, CollectivesAreIdentity) {
  auto c = CreateSingleRankCommunicator();
  Tensor t = Tensor::Host(DType::kF32, {3});
  t.data<float>()[1] = 2.0f;
  ASSERT_TRUE(c->AllReduceSum(&t).ok());
  EXPECT_EQ(t.data<float>()[1], 2.0f);
  Tensor out = Tensor::Host(DType::kF32, {1, 3});
  ASSERT_TRUE(c->AllGather(t, &out).ok());
  EXPECT_EQ(out.data<float>()[1], 2.0f);
  EXPECT_TRUE(c->Barrier().ok());
}

TEST(CommOptionsTest, Validate) {
  CommOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.timeout = milliseconds(0);
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// ---- rendezvous ----------------------------------------------------------

TEST(RendezvousTest, SetGetAcrossClientsAndGetWaits) {
  auto server = RendezvousServer::Start("127.0.0.1:0", StoreOptions(0, 0, 2));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto a = RendezvousClient::Connect(StoreOptions(port, 0, 2));
  auto b = RendezvousClient::Connect(StoreOptions(port, 1, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->local_host(), "127.0.0.1");
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(milliseconds(200));
    return (*a)->Set("nccl_id", std::string("\0\1\2", 3));
  });
  auto v = (*b)->Get("nccl_id", milliseconds(3000));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("\0\1\2", 3));
  EXPECT_TRUE(later.get().ok());
  auto missing = (*b)->Get("never", milliseconds(200));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(missing.status().message(), HasSubstr("never"));
}

TEST(RendezvousTest, ClientRetriesUntilTheServerAppears) {
  // Find a free port, then start the server on it only after the client
  // has begun retrying.
  int port = 0;
  {
    auto probe = RendezvousServer::Start("127.0.0.1:0", StoreOptions(0, 0, 2));
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  auto client = std::async(std::launch::async,
                           [&] { return RendezvousClient::Connect(StoreOptions(port, 1, 2)); });
  std::this_thread::sleep_for(milliseconds(600));
  auto server = RendezvousServer::Start(absl::StrCat("127.0.0.1:", port), StoreOptions(0, 0, 2));
  ASSERT_TRUE(server.ok()) << server.status();
  auto c = client.get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Set("k", "v").ok());
}

TEST(RendezvousTest, ClearFailureAfterBoundedRetries) {
  int port = 0;
  {
    auto probe = RendezvousServer::Start("127.0.0.1:0", StoreOptions(0, 0, 2));
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  RendezvousOptions o = StoreOptions(port, 1, 2);
  o.connect_timeout = milliseconds(800);
  const Clock::time_point t0 = Clock::now();
  auto c = RendezvousClient::Connect(o);
  const double took = Seconds(t0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(), HasSubstr(o.address));
  EXPECT_THAT(c.status().message(), HasSubstr("rank 1 of 2"));
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 4.0);

  // A name that does not resolve (a headless service before its record exists).
  o.address = "treespec-worker-0.no-such-service.invalid:29500";
  auto d = RendezvousClient::Connect(o);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("cannot resolve"));
  EXPECT_THAT(d.status().message(), HasSubstr(o.address));
}

TEST(RendezvousTest, BadAddressesAreInvalidArguments) {
  RendezvousOptions o = StoreOptions(1, 1, 2);
  o.address = "no-port";
  EXPECT_EQ(RendezvousClient::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.address = "127.0.0.1:1";
  o.rank = 2;
  EXPECT_EQ(RendezvousClient::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousTest, LostSessionsNameTheRank) {
  RendezvousOptions so = StoreOptions(0, 0, 3);
  auto server = RendezvousServer::Start("127.0.0.1:0", so);
  ASSERT_TRUE(server.ok());
  auto lost = std::make_shared<std::promise<std::pair<int, std::string>>>();
  auto lost_future = lost->get_future();
  auto once = std::make_shared<std::once_flag>();
  (*server)->SetLossCallback([lost, once](int rank, const std::string& reason) {
    std::call_once(*once, [&] { lost->set_value({rank, reason}); });
  });
  const int port = (*server)->port();
  auto one = RendezvousClient::Connect(StoreOptions(port, 1, 3));
  auto two = RendezvousClient::Connect(StoreOptions(port, 2, 3));
  ASSERT_TRUE(one.ok() && two.ok());
  ASSERT_TRUE((*one)->StartSession([](const std::string&) {}).ok());
  ASSERT_TRUE((*two)->StartSession([](const std::string&) {}).ok());
  // A second process claiming rank 2 is refused.
  auto dup = RendezvousClient::Connect(StoreOptions(port, 2, 3));
  ASSERT_TRUE(dup.ok());
  absl::Status st = (*dup)->StartSession([](const std::string&) {});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("rank 2 has already joined"));
  // Wrong group size.
  auto wrong = RendezvousClient::Connect(StoreOptions(port, 1, 4));
  ASSERT_TRUE(wrong.ok());
  EXPECT_THAT((*wrong)->StartSession([](const std::string&) {}).message(), HasSubstr("--tp-size 3"));

  std::this_thread::sleep_for(milliseconds(300));  // pings flow; nobody is lost
  EXPECT_EQ(lost_future.wait_for(milliseconds(0)), std::future_status::timeout);
  two->reset();  // rank 2's process goes away
  ASSERT_EQ(lost_future.wait_for(milliseconds(3000)), std::future_status::ready);
  auto [rank, reason] = lost_future.get();
  EXPECT_EQ(rank, 2);
  EXPECT_THAT(reason, HasSubstr("closed"));
}

TEST(RendezvousTest, FollowerSeesRankZeroGo) {
  auto server = RendezvousServer::Start("127.0.0.1:0", StoreOptions(0, 0, 2));
  ASSERT_TRUE(server.ok());
  auto one = RendezvousClient::Connect(StoreOptions((*server)->port(), 1, 2));
  ASSERT_TRUE(one.ok());
  auto lost = std::make_shared<std::promise<std::string>>();
  auto f = lost->get_future();
  ASSERT_TRUE((*one)->StartSession([lost](const std::string& why) { lost->set_value(why); }).ok());
  EXPECT_EQ(f.wait_for(milliseconds(300)), std::future_status::timeout);
  const Clock::time_point t0 = Clock::now();
  server->reset();
  ASSERT_EQ(f.wait_for(milliseconds(3000)), std::future_status::ready);
  EXPECT_THAT(f.get(), HasSubstr("rank 0"));
  EXPECT_LT(Seconds(t0), 3.0);
}

}  // namespace
}  // namespace treespec
