#include "tests/integration/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace treespec::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::unique_ptr<RankProcess> RankProcess::Spawn(const std::vector<std::string>& argv) {
  auto p = std::unique_ptr<RankProcess>(new RankProcess());
  p->stderr_path_ = absl::StrCat(::testing::TempDir(), "worker_group_", getpid(), "_",
                                 counter_++, ".stderr");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "OMP_NUM_THREADS=")) env_storage.push_back(*e);
  }
  env_storage.push_back("OMP_NUM_THREADS=1");
  std::vector<char*> env;
  for (std::string& e : env_storage) env.push_back(e.data());
  env.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  const int err = open(p->stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    if (err >= 0) close(err);
    return nullptr;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    if (err >= 0) dup2(err, STDERR_FILENO);
    syscall(SYS_close_range, 3U, ~0U, 0U);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(args[0], args.data(), env.data());
    _exit(127);
  }
  close(fds[1]);
  if (err >= 0) close(err);
  p->pid_ = pid;
  p->stdout_fd_ = fds[0];
  return p;
}

RankProcess::~RankProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
  unlink(stderr_path_.c_str());
}

absl::StatusOr<std::string> RankProcess::WaitLine(const std::string& prefix,
                                                  milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  while (true) {
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (absl::StartsWith(line, prefix)) return line.substr(prefix.size());
    }
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no '", prefix, "' line; stderr: ", Stderr()));
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[1024];
    const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("exited before '", prefix, "'; stderr: ", Stderr()));
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

int RankProcess::WaitExit(milliseconds timeout) {
  const Clock::time_point until = Clock::now() + timeout;
  while (pid_ > 0) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_status_ = status;
      break;
    }
    if (Clock::now() >= until) return -1;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return exit_status_;
}

void RankProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

std::string RankProcess::Stderr() const {
  std::ifstream in(stderr_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> WorkerArgs(int size, int rank, const std::string& rendezvous,
                                    double collective_timeout_s, const std::string& model) {
  return {BinaryPath("treespec-worker"),
          "--model", FixtureModel(model),
          "--listen", "127.0.0.1:0",
          "--kv-blocks", "1024",
          "--kv-block-size", "16",
          "--max-context", "256",
          "--tp-size", std::to_string(size),
          "--tp-rank", std::to_string(rank),
          "--rendezvous", rendezvous,
          "--rendezvous-timeout-s", "30",
          "--collective-timeout-s", absl::StrCat(collective_timeout_s),
          "--prefill-chunk-tokens", "3"};
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(
    int size, double collective_timeout_s, const std::string& model,
    const std::vector<std::string>& extra) {
  auto g = std::make_unique<WorkerGroup>();
  auto args = [&](int rank, const std::string& rendezvous) {
    std::vector<std::string> a = WorkerArgs(size, rank, rendezvous, collective_timeout_s, model);
    if (size == 1) a.resize(a.size() - 12);
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  g->ranks.push_back(RankProcess::Spawn(args(0, "127.0.0.1:0")));
  if (g->ranks[0] == nullptr) return absl::InternalError("spawn failed");
  if (size > 1) {
    auto rendezvous = g->ranks[0]->WaitLine("rendezvous on ", milliseconds(30000));
    if (!rendezvous.ok()) return rendezvous.status();
    for (int r = 1; r < size; ++r) {
      g->ranks.push_back(RankProcess::Spawn(args(r, *rendezvous)));
      if (g->ranks.back() == nullptr) return absl::InternalError("spawn failed");
    }
  }
  auto listening = g->ranks[0]->WaitLine("listening on ", milliseconds(60000));
  if (!listening.ok()) return listening.status();
  g->address = *listening;
  return g;
}

}  // namespace treespec::testing
