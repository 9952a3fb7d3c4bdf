#include "rpc/service_main.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/util/cli_args.h"
#include "rpc/flag_help.h"
#include "rpc/signals.h"

namespace treespec {

void InitServiceMain(int argc, char** argv, const char* usage) {
  BlockTerminationSignals();
  ConfigureFlagHelp();
  absl::SetProgramUsageMessage(usage);
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeFlagNames(argc, argv, &storage);
  absl::ParseCommandLine(argc, args.data());
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
