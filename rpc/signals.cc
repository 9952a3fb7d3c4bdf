#include "rpc/signals.h"

#include <pthread.h>
#include <signal.h>

namespace treespec {
namespace {

sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSet();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace treespec
