// Scheduling hints for a serving process whose cores are shared with other
// processes: a live decoding step wakes several threads in turn, and each
// wakeup that waits for a core adds to the stream's inter-token gap (issue 10
// point 3).
//
// Measured when this was written, on the 2-core development machine (Linux
// 6.18, EEVDF scheduler, HZ 250) while nice-10 processes (a training run,
// compilers) kept both cores busy: a nice-0 thread that sleeps 1 ms and works 0.2 ms waited more than
// 1 ms for its core after 2-17% of its wakeups, up to 4.5 ms (a tick),
// because EEVDF lets the running task finish its slice before a waking one
// preempts it. A step of the demo models takes 2-3 ms and wakes 4-6 threads
// in turn (lane, worker, gRPC, stream handler, client), so those waits alone
// took a live stream's gap to 3-5 times its median.
//
// RequestShortSlices asks for a short slice (sched_attr.sched_runtime of a
// SCHED_OTHER thread, Linux 6.12 and later): a waking thread with a shorter
// slice than the running one preempts it at once. With 100 us the same
// thread waited > 1 ms after 0.1-0.2% of its wakeups. Threads created later
// inherit it, so a server calls it first thing in main. It changes no weight:
// the process gets no larger share of the cores, only its wakeups are served
// sooner. Older kernels ignore the field or refuse it (the status says so).
//
// Off by default (--sched_slice_us 0): in 8 paired runs of prefill_stall_test
// on the same machine at load averages of 8-9, a 100 us slice in all three
// services cut the live streams' p99 gap from 9.0 to 3.0 times their median
// (medians over the runs) but raised that median from 2.5 to 6.0 ms: the
// services' own compute is preempted sooner too, so the pace is slower. A
// deployment that values a short tail over throughput may turn it on.
#pragma once

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace treespec {

// Asks for `slice` as the calling thread's fair-class slice (and so that of
// every thread it creates afterwards). Thread-safe; changes only the caller.
absl::Status RequestShortSlices(absl::Duration slice);

}  // namespace treespec
