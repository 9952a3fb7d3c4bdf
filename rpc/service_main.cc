#include "rpc/service_main.h"

#include <errno.h>  // program_invocation_short_name (glibc)

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/util/cli_args.h"
#include "core/util/sched_hints.h"
#include "rpc/signals.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT to serve gRPC on (port 0: any free port)");
ABSL_FLAG(int32_t, shutdown_grace_s, 30,
          "Seconds in-flight calls (and coordinator streams) may take after SIGTERM");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate (enables TLS on --listen)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(int32_t, sched_slice_us, 0,
          "Scheduler slice asked for every thread of the process (Linux 6.12+ EEVDF; 0: the "
          "kernel's default): a short slice (100) lets the threads of live steps preempt other "
          "processes' work as soon as they wake up, for a shorter tail of inter-token gaps but a "
          "longer median on a loaded machine (core/util/sched_hints.h)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle: clients must present a certificate it signed (mutual TLS); the "
          "coordinator also verifies workers and drafters with it and presents --tls_cert to them");

namespace treespec {

ServiceFlags GetServiceFlags() {
  ServiceFlags f;
  f.listen = absl::GetFlag(FLAGS_listen);
  f.shutdown_grace = std::chrono::seconds(absl::GetFlag(FLAGS_shutdown_grace_s));
  f.tls = TlsFiles{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                   absl::GetFlag(FLAGS_tls_ca)};
  return f;
}

void InitServiceMain(int argc, char** argv, const char* usage) {
  BlockTerminationSignals();
  // Debian's Abseil is built without NDEBUG, so by default every Mutex lock
  // also records lock-order edges for deadlock detection (GraphCycles, a
  // visible share of the step loop's CPU in a profile). Services turn it off;
  // tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(usage);
  ParseFlags(argc, argv);
  // Before any thread starts: the threads created later inherit the slice.
  if (const int32_t us = absl::GetFlag(FLAGS_sched_slice_us); us > 0) {
    const absl::Status st = RequestShortSlices(absl::Microseconds(us));
    if (!st.ok()) std::cerr << program_invocation_short_name << ": note: " << st << std::endl;
  }
}

int FailService(const absl::Status& status) {
  std::cerr << program_invocation_short_name << ": " << status << std::endl;
  return 1;
}

absl::StatusOr<std::unique_ptr<ServiceObservability>> StartServiceObservability(
    const std::string& default_service_name, int rank) {
  return ServiceObservability::Start(
      ObservabilityOptions::FromFlags(default_service_name, absl::GetFlag(FLAGS_listen), rank));
}

absl::StatusOr<RunningServer> StartServiceServer(const std::vector<grpc::Service*>& services,
                                                 ServiceObservability* obs,
                                                 std::set<std::string> untraced,
                                                 bool require_client_cert) {
  ServiceFlags f = GetServiceFlags();
  f.tls.require_client_cert = require_client_cert;
  return StartServer(f.listen, services, f.tls,
                     obs->Interceptors(untraced, StepStreamMethods(services)),
                     obs->StreamCalls(untraced));
}

int ServeUntilSignal(RunningServer* server, ServiceObservability* obs,
                     const std::function<void()>& after_drain,
                     const std::function<void()>& at_grace_end) {
  obs->SetServing(true);
  std::printf("listening on %s\n", server->address.c_str());
  std::fflush(stdout);
  WaitForTerminationSignal();
  obs->SetServing(false);
  server->server->GetHealthCheckService()->SetServingStatus(false);
  const auto grace = GetServiceFlags().shutdown_grace;
  absl::Notification drained;
  std::thread ender;
  if (at_grace_end) {
    // Leave the calls a moment to write their final status before the cut.
    const absl::Duration margin = absl::Milliseconds(
        std::min<int64_t>(500, std::chrono::duration_cast<std::chrono::milliseconds>(grace).count() / 4));
    ender = std::thread([&, margin] {
      if (!drained.WaitForNotificationWithTimeout(absl::FromChrono(grace) - margin)) at_grace_end();
    });
  }
  server->Shutdown(std::chrono::system_clock::now() + grace);
  drained.Notify();
  if (ender.joinable()) ender.join();
  if (after_drain) after_drain();
  obs->Shutdown();
  return 0;
}

}  // namespace treespec
