// The start and end every service binary shares: command-line set-up, and
// serving until SIGTERM/SIGINT followed by a graceful drain (health
// NOT_SERVING, no new calls, in-flight calls get the grace period, traces
// flushed).
#pragma once

#include <chrono>
#include <functional>

#include "rpc/observability.h"
#include "rpc/server.h"

namespace treespec {

// Blocks termination signals (call before any thread starts), installs --help
// listing the binary's flags, accepts dashed flag names and parses argv.
void InitServiceMain(int argc, char** argv, const char* usage);

// Marks the service serving, prints `listening on HOST:PORT`, waits for
// SIGTERM/SIGINT, then drains. `after_drain` runs once in-flight calls have
// finished, before observability shuts down. Returns the process exit code.
int ServeUntilSignal(RunningServer* server, ServiceObservability* obs, std::chrono::seconds grace,
                     const std::function<void()>& after_drain = nullptr);

}  // namespace treespec
