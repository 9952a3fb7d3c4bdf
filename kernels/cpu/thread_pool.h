// ParallelChunks: the CPU kernels' threads. The caller and up to `threads` - 1
// persistent workers each take a contiguous range of chunks [0, chunks) and
// steal from the back of the others' once theirs is done (thread_pool.cc);
// the caller returns once every chunk is done.
//
// Why not an OpenMP parallel-for: its join waits for every team thread to
// arrive, so on a machine whose other cores are busy one descheduled thread
// stalls each matrix product for a scheduler tick, and two threads ran slower
// than one. Here a worker that has not started claims nothing and nobody waits
// for it: the caller does the remaining chunks itself and waits only for
// chunks already claimed. Workers spin briefly after a job (decode issues one
// every few microseconds), then sleep on a condition variable.
//
// Which thread runs a chunk never changes what it computes, so results do not
// depend on the thread count. Thread-safe: a call made while the pool is busy
// (another backend in the process) runs its chunks on the calling thread.
#pragma once

#include <functional>

namespace treespec::cpu {

void ParallelChunks(int threads, int chunks, const std::function<void(int)>& fn);

}  // namespace treespec::cpu
