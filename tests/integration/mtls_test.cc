// Mutual TLS between all services, proven by refusals: treespec-worker,
// treespec-drafter and treespec-coordinator binaries (fixture models) run with
// --tls_cert/--tls_key/--tls_ca, the certificates made at test time by
// tests/integration/mtls/make_certs.sh (openssl CLI). Each service must refuse
// a plaintext client, a TLS client without a certificate, a client whose
// certificate another CA signed and a client whose certificate has expired,
// and serve a correctly certified client in the same test. The coordinator
// reaches its worker and drafter over mTLS with its own certificate and its
// output equals plain greedy decoding. A coordinator with
// --public_client_certs=optional lets TLS clients without a certificate in
// but still refuses bad certificates.
#include <sys/wait.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/server.h"
#include "tests/integration/ops_testing.h"

namespace treespec::testing {
namespace {

using std::chrono::milliseconds;

// The clients every service is probed with.
struct Client {
  std::string name;
  TlsFiles tls;
  bool is_certified = false;  // signed by the cluster's CA and in date
};

std::vector<Client> Clients(const std::string& certs) {
  const std::string ca = certs + "/ca.pem";
  auto pair = [&](const std::string& name) {
    return TlsFiles{certs + "/" + name + ".pem", certs + "/" + name + ".key", ca};
  };
  return {
      {"certified client", pair("client"), true},
      {"plaintext client", TlsFiles{}, false},
      {"TLS client without a certificate", TlsFiles{"", "", ca}, false},
      {"client certified by another CA", pair("other-client"), false},
      {"client with an expired certificate", pair("expired-client"), false},
  };
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

grpc::Status ProbeWorker(const std::string& address, const TlsFiles& tls) {
  auto stub = v1::Worker::NewStub(MakeChannel(address, tls));
  grpc::ClientContext ctx;
  v1::WorkerInfo info;
  return stub->GetWorkerInfo(WithDeadline(&ctx), v1::GetWorkerInfoRequest(), &info);
}

grpc::Status ProbeDrafter(const std::string& address, const TlsFiles& tls) {
  auto stub = v1::Drafter::NewStub(MakeChannel(address, tls));
  grpc::ClientContext ctx;
  v1::DrafterInfoResponse info;
  return stub->GetDrafterInfo(WithDeadline(&ctx), v1::GetDrafterInfoRequest(), &info);
}

grpc::Status ProbeCoordinator(const std::string& address, const TlsFiles& tls) {
  auto stub = v1::Generation::NewStub(MakeChannel(address, tls));
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  return stub->GetModelInfo(WithDeadline(&ctx), v1::GetModelInfoRequest(), &info);
}

class MtlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir());
    certs_ = new std::string(*dir_ + "/certs");
    auto made = RunProcess({"/bin/bash", std::string(TREESPEC_SOURCE_DIR) +
                                             "/tests/integration/mtls/make_certs.sh",
                            *certs_},
                           milliseconds(60000));
    if (!made.ok() || !WIFEXITED(made->wait_status) || WEXITSTATUS(made->wait_status) != 0) {
      return Fail("make_certs.sh failed (is the openssl CLI installed?)");
    }
    const std::vector<std::string> tls = {"--tls_cert", *certs_ + "/service.pem", "--tls_key",
                                          *certs_ + "/service.key", "--tls_ca",
                                          *certs_ + "/ca.pem"};
    auto with_tls = [&](std::vector<std::string> argv) {
      argv.insert(argv.end(), tls.begin(), tls.end());
      return argv;
    };
    auto worker = ServiceProcess::Start(
        with_tls({BinaryPath("treespec-worker"), "--model", FixtureModel(kTargetModel),
                  "--listen", "127.0.0.1:0", "--max-context", "256", "--kv-tokens", "16384"}),
        *dir_ + "/worker");
    if (!worker.ok()) return Fail(worker.status().ToString());
    worker_ = worker->release();
    auto drafter = ServiceProcess::Start(
        with_tls({BinaryPath("treespec-drafter"), "--kind", "mamba", "--model",
                  FixtureModel(kMambaModel), "--listen", "127.0.0.1:0", "--max-context", "512"}),
        *dir_ + "/drafter");
    if (!drafter.ok()) return Fail(drafter.status().ToString());
    drafter_ = drafter->release();
    for (const bool optional : {false, true}) {
      std::vector<std::string> argv = with_tls(
          {BinaryPath("treespec-coordinator"), "--listen", "127.0.0.1:0", "--workers",
           worker_->address(), "--drafters", "mamba=" + drafter_->address(),
           "--startup_timeout_s", "20"});
      if (optional) argv.insert(argv.end(), {"--public_client_certs", "optional"});
      auto c = ServiceProcess::Start(argv, *dir_ + (optional ? "/coordinator-optional"
                                                             : "/coordinator"));
      if (!c.ok()) return Fail(c.status().ToString());
      (optional ? optional_coordinator_ : coordinator_) = c->release();
    }
  }
  static void Fail(const std::string& error) { error_ = new std::string(error); }
  static void TearDownTestSuite() {
    delete optional_coordinator_;
    delete coordinator_;
    delete drafter_;
    delete worker_;
    delete certs_;
    delete dir_;
    delete error_;
    optional_coordinator_ = coordinator_ = drafter_ = worker_ = nullptr;
    certs_ = dir_ = error_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(error_, nullptr) << *error_; }

  // Each client of Clients() against `probe`: the certified one (and, with
  // `certless_ok`, the TLS client without a certificate) served, the rest
  // refused.
  static void ExpectOnlyCertifiedClientsServed(
      const std::string& service, const std::string& address,
      grpc::Status (*probe)(const std::string&, const TlsFiles&), bool certless_ok = false) {
    for (const Client& c : Clients(*certs_)) {
      const bool served = c.is_certified || (certless_ok && c.tls.cert.empty() && !c.tls.ca.empty());
      const grpc::Status st = probe(address, c.tls);
      if (served) {
        EXPECT_TRUE(st.ok()) << service << ", " << c.name << ": " << st.error_code() << " "
                             << st.error_message();
      } else {
        EXPECT_FALSE(st.ok()) << service << " served a " << c.name;
        EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE)
            << service << ", " << c.name << ": " << st.error_message();
      }
    }
  }

  static inline std::string* dir_ = nullptr;
  static inline std::string* certs_ = nullptr;
  static inline ServiceProcess* worker_ = nullptr;
  static inline ServiceProcess* drafter_ = nullptr;
  static inline ServiceProcess* coordinator_ = nullptr;
  static inline ServiceProcess* optional_coordinator_ = nullptr;
  static inline std::string* error_ = nullptr;
};

TEST_F(MtlsTest, WorkerServesOnlyCertifiedClients) {
  ExpectOnlyCertifiedClientsServed("worker", worker_->address(), ProbeWorker);
}

TEST_F(MtlsTest, DrafterServesOnlyCertifiedClients) {
  ExpectOnlyCertifiedClientsServed("drafter", drafter_->address(), ProbeDrafter);
}

TEST_F(MtlsTest, CoordinatorServesOnlyCertifiedClients) {
  ExpectOnlyCertifiedClientsServed("coordinator", coordinator_->address(), ProbeCoordinator);
}

TEST_F(MtlsTest, OptionalClientCertsStillRefuseBadCertificates) {
  ExpectOnlyCertifiedClientsServed("coordinator (optional client certificates)",
                                   optional_coordinator_->address(), ProbeCoordinator,
                                   /*certless_ok=*/true);
}

TEST_F(MtlsTest, ClusterOverMtlsDecodesLikePlainGreedy) {
  const TlsFiles client = Clients(*certs_)[0].tls;
  auto stub = v1::Generation::NewStub(MakeChannel(coordinator_->address(), client));
  const std::vector<std::vector<int32_t>> prompts = {TestPrompt(0), TestPrompt(1)};
  const int kTokens = 16;
  const auto reference = GreedyReference(prompts, kTokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (const std::string drafter : {"mamba", "none"}) {
      GenerateResult r = RunGenerate(stub.get(), MakeRequest(prompts[i], kTokens, drafter, drafter == "none" ? "" : "2,2"));
      ASSERT_TRUE(r.status.ok()) << drafter << ": " << r.status.error_message();
      EXPECT_EQ(r.ids, reference[i]) << "prompt " << i << ", drafter " << drafter;
      if (drafter == "mamba") {
        // The drafter was reached (over mTLS) and its drafts verified.
        EXPECT_GT(r.final_chunk.speculation().drafted_tokens(), 0) << "prompt " << i;
        EXPECT_EQ(r.final_chunk.speculation().fallback_steps(), 0) << "prompt " << i;
      }
    }
  }
}

TEST_F(MtlsTest, CoordinatorWithoutAClientCertificateCannotReachItsWorker) {
  // TLS to the worker with the right CA but no certificate of its own: the
  // worker refuses it, so the coordinator cannot start.
  auto run = RunProcess(
      {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", BinaryPath("treespec-coordinator"),
       "--listen", "127.0.0.1:0", "--workers", worker_->address(), "--tls_ca",
       *certs_ + "/ca.pem", "--startup_timeout_s", "3"},
      milliseconds(60000));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(WIFEXITED(run->wait_status) && WEXITSTATUS(run->wait_status) == 1)
      << "wait status " << run->wait_status << "\n" << run->stdout_text;
  EXPECT_THAT(run->stdout_text,
              ::testing::HasSubstr("UNAVAILABLE: worker " + worker_->address()));
  EXPECT_THAT(run->stdout_text, ::testing::Not(::testing::HasSubstr("listening on")));
  // The worker saw a TLS client that sent no certificate.
  EXPECT_THAT(worker_->log(), ::testing::HasSubstr("peer did not return a certificate"));
}

TEST_F(MtlsTest, CliPresentsItsCertificate) {
  auto cli = [&](const std::vector<std::string>& tls) {
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                     BinaryPath("treespec"), "generate", "--server",
                                     coordinator_->address(), "--ids", "5,9,17", "--max-tokens",
                                     "4", "--drafter", "mamba", "--timeout-s", "20"};
    argv.insert(argv.end(), tls.begin(), tls.end());
    auto run = RunProcess(argv, milliseconds(60000));
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() && WIFEXITED(run->wait_status) ? std::make_pair(WEXITSTATUS(run->wait_status),
                                                                    run->stdout_text)
                                                   : std::make_pair(-1, std::string());
  };
  const std::string ca = *certs_ + "/ca.pem";
  auto [code, out] = cli({"--tls-ca", ca, "--tls-cert", *certs_ + "/client.pem", "--tls-key",
                          *certs_ + "/client.key"});
  EXPECT_EQ(code, 0) << out;
  std::tie(code, out) = cli({"--tls-ca", ca});
  EXPECT_EQ(code, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("treespec: UNAVAILABLE")) << out;
  std::tie(code, out) = cli({"--tls-ca", ca, "--tls-cert", *certs_ + "/expired-client.pem",
                             "--tls-key", *certs_ + "/expired-client.key"});
  EXPECT_EQ(code, 1) << out;
}

TEST_F(MtlsTest, TlsFlagsThatWouldServePlaintextAreRefused) {
  // --tls_ca alone would verify nobody on a plaintext port; a certificate
  // without its key cannot serve TLS.
  const std::vector<std::vector<std::string>> bad = {
      {"--tls_ca", *certs_ + "/ca.pem"},
      {"--tls_cert", *certs_ + "/service.pem", "--tls_ca", *certs_ + "/ca.pem"},
  };
  const std::vector<std::string> expected = {"without --tls_cert/--tls_key",
                                             "--tls_cert and --tls_key go together"};
  for (size_t i = 0; i < bad.size(); ++i) {
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                     BinaryPath("treespec-drafter"), "--kind", "mamba", "--model",
                                     FixtureModel(kMambaModel), "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), bad[i].begin(), bad[i].end());
    auto run = RunProcess(argv, milliseconds(60000));
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_TRUE(WIFEXITED(run->wait_status) && WEXITSTATUS(run->wait_status) == 1)
        << run->stdout_text;
    EXPECT_THAT(run->stdout_text, ::testing::HasSubstr("INVALID_ARGUMENT"));
    EXPECT_THAT(run->stdout_text, ::testing::HasSubstr(expected[i]));
    EXPECT_THAT(run->stdout_text, ::testing::Not(::testing::HasSubstr("listening on")));
  }
}

TEST_F(MtlsTest, PublicClientCertsFlagIsChecked) {
  auto run = RunProcess({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                         BinaryPath("treespec-coordinator"), "--listen", "127.0.0.1:0",
                         "--workers", worker_->address(), "--public-client-certs", "sometimes"},
                        milliseconds(60000));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(WIFEXITED(run->wait_status) && WEXITSTATUS(run->wait_status) == 1)
      << run->stdout_text;
  EXPECT_THAT(run->stdout_text,
              ::testing::HasSubstr("--public_client_certs: 'sometimes' is not require or optional"));
}

}  // namespace
}  // namespace treespec::testing
