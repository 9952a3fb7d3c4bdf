// Process lifecycle helpers for the service binaries: block SIGTERM/SIGINT in
// every thread (call first in main, before any thread starts) and wait for one
// of them in the main thread.
#pragma once

namespace treespec {

void BlockTerminationSignals();
// Returns the signal number received (SIGTERM or SIGINT).
int WaitForTerminationSignal();

}  // namespace treespec
