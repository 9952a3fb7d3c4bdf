#include "rpc/service_main.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/usage.h"
#include "core/util/cli_args.h"
#include "rpc/signals.h"

namespace treespec {

void InitServiceMain(int argc, char** argv, const char* usage) {
  BlockTerminationSignals();
  absl::SetProgramUsageMessage(usage);
  ParseFlags(argc, argv);
}

int ServeUntilSignal(RunningServer* server, ServiceObservability* obs, std::chrono::seconds grace,
                     const std::function<void()>& after_drain) {
  obs->SetServing(true);
  std::printf("listening on %s\n", server->address.c_str());
  std::fflush(stdout);
  WaitForTerminationSignal();
  obs->SetServing(false);
  server->server->GetHealthCheckService()->SetServingStatus(false);
  server->server->Shutdown(std::chrono::system_clock::now() + grace);
  if (after_drain) after_drain();
  obs->Shutdown();
  return 0;
}

}  // namespace treespec
