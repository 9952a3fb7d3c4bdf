// Makes absl::Mutex, absl::CondVar and absl::Notification visible to
// ThreadSanitizer in the TSan build (cmake/sanitize.cmake links this object
// into every executable there; nowhere else).
//
// Why: TSan learns happens-before from the synchronisation it sees, that is
// pthread calls (intercepted) and atomics in instrumented code. Debian's
// libabsl_synchronization is not built with TSan, and absl::Mutex locks with
// its own atomics and futex calls, so to TSan every absl::Mutex is invisible:
// each access to data it guards would be reported as a race. abseil annotates
// its mutex for TSan itself, but only when abseil is compiled with
// -fsanitize=thread, which Debian's package is not.
//
// How: the executable defines the Mutex, CondVar and Notification member
// functions that treespec (and gRPC, which uses absl::Mutex too) call. These
// definitions interpose the shared library's (an executable's symbols come
// first in the global scope; -rdynamic exports them), tell TSan what happens
// with the __tsan_mutex_* annotations, and call the library's own definition,
// found with dlsym(RTLD_NEXT). Between pre- and post-annotations TSan ignores
// the thread's memory accesses, as it does inside its own pthread interceptors;
// that covers the Condition functions absl evaluates while it locks, unlocks
// or waits. A wait (Await, CondVar::Wait) is modelled as unlock + lock, which
// is what it does when the condition does not already hold.
//
// The mangled names name Debian's inline namespace (absl::debian3, abseil
// 20220623); a different abseil fails the first lookup with a message, not
// silently.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

// The library's definition of `mangled`, or the process ends naming it.
template <typename Fn>
Fn Real(const char* mangled) {
  void* fn = dlsym(RTLD_NEXT, mangled);
  if (fn == nullptr) {
    std::fprintf(stderr,
                 "tsan_absl_sync: %s not found in libabsl (%s); rebuild "
                 "tools/sanitizers/tsan_absl_sync.cc for this abseil\n",
                 mangled, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// Some entry points call others through the PLT (CondVar::WaitWithTimeout
// calls WaitWithDeadline, Notification's waits lock its mutex); only the
// outermost call on a thread is annotated.
thread_local int depth = 0;
struct Nesting {
  Nesting() : outer(depth++ == 0) {}
  ~Nesting() { --depth; }
  const bool outer;
};

// Declares `real`, the library's definition, and returns its result directly
// when this call is nested in another annotated one.
#define TS_REAL(type, mangled, ...)             \
  static const auto real = Real<type>(mangled); \
  const Nesting nesting;                        \
  if (!nesting.outer) return real(__VA_ARGS__)

constexpr unsigned kRead = __tsan_mutex_read_lock;

// Annotates a lock taken by `lock()` (which returns whether it succeeded when
// `try_lock`).
template <typename F>
bool Locked(void* mu, unsigned flags, F lock) {
  __tsan_mutex_pre_lock(mu, flags);
  const bool ok = lock();
  __tsan_mutex_post_lock(mu, ok ? flags : flags | __tsan_mutex_try_lock_failed, 0);
  return ok;
}

// A lock call that holds `mu` when it returns whatever it returns (the
// *WithTimeout / *WithDeadline forms); its result is passed through.
template <typename F>
auto Held(void* mu, unsigned flags, F lock) {
  __tsan_mutex_pre_lock(mu, flags);
  const auto result = lock();
  __tsan_mutex_post_lock(mu, flags, 0);
  return result;
}

// A call that releases `mu` and holds it again when it returns.
template <typename F>
auto Waited(void* mu, unsigned flags, F wait) {
  __tsan_mutex_pre_unlock(mu, flags);
  const auto result = wait();
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
  __tsan_mutex_post_lock(mu, flags, 0);
  return result;
}

}  // namespace

namespace absl {

using MuFn = void (*)(Mutex*);
using MuTryFn = bool (*)(Mutex*);
using MuCondFn = void (*)(Mutex*, const Condition&);
using MuCondTimeoutFn = bool (*)(Mutex*, const Condition&, Duration);
using MuCondDeadlineFn = bool (*)(Mutex*, const Condition&, Time);

Mutex::~Mutex() {
  static const auto real = Real<MuFn>("_ZN4absl7debian35MutexD2Ev");
  if (depth == 0) __tsan_mutex_destroy(this, 0);
  real(this);
}

void Mutex::Lock() {
  TS_REAL(MuFn, "_ZN4absl7debian35Mutex4LockEv", this);
  Locked(this, 0, [&] {
    real(this);
    return true;
  });
}

void Mutex::ReaderLock() {
  TS_REAL(MuFn, "_ZN4absl7debian35Mutex10ReaderLockEv", this);
  Locked(this, kRead, [&] {
    real(this);
    return true;
  });
}

bool Mutex::TryLock() {
  TS_REAL(MuTryFn, "_ZN4absl7debian35Mutex7TryLockEv", this);
  return Locked(this, __tsan_mutex_try_lock, [&] { return real(this); });
}

bool Mutex::ReaderTryLock() {
  TS_REAL(MuTryFn, "_ZN4absl7debian35Mutex13ReaderTryLockEv", this);
  return Locked(this, kRead | __tsan_mutex_try_lock, [&] { return real(this); });
}

void Mutex::Unlock() {
  TS_REAL(MuFn, "_ZN4absl7debian35Mutex6UnlockEv", this);
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

void Mutex::ReaderUnlock() {
  TS_REAL(MuFn, "_ZN4absl7debian35Mutex12ReaderUnlockEv", this);
  __tsan_mutex_pre_unlock(this, kRead);
  real(this);
  __tsan_mutex_post_unlock(this, kRead);
}

void Mutex::LockWhen(const Condition& cond) {
  TS_REAL(MuCondFn, "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE", this, cond);
  Locked(this, 0, [&] {
    real(this, cond);
    return true;
  });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  TS_REAL(MuCondFn, "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE", this, cond);
  Locked(this, kRead, [&] {
    real(this, cond);
    return true;
  });
}

// The *WithTimeout / *WithDeadline forms hold the mutex on return whatever
// they return.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  TS_REAL(MuCondTimeoutFn,
          "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_"
          "8DurationE",
          this, cond, timeout);
  return Held(this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  TS_REAL(MuCondTimeoutFn,
          "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_"
          "9ConditionENS0_8DurationE",
          this, cond, timeout);
  return Held(this, kRead, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  TS_REAL(MuCondDeadlineFn,
          "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_"
          "4TimeE",
          this, cond, deadline);
  return Held(this, 0, [&] { return real(this, cond, deadline); });
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  TS_REAL(MuCondDeadlineFn,
          "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_"
          "9ConditionENS0_4TimeE",
          this, cond, deadline);
  return Held(this, kRead, [&] { return real(this, cond, deadline); });
}

// Await is called holding the mutex in either mode; TSan's own record of how
// it is held decides, so the annotation uses write mode (a reader that
// releases and re-takes in write mode is only stricter).
void Mutex::Await(const Condition& cond) {
  TS_REAL(MuCondFn, "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE", this, cond);
  Waited(this, 0, [&] {
    real(this, cond);
    return true;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  TS_REAL(MuCondTimeoutFn,
          "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_"
          "8DurationE",
          this, cond, timeout);
  return Waited(this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  TS_REAL(MuCondDeadlineFn, "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE",
          this, cond, deadline);
  return Waited(this, 0, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  TS_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE", this, mu);
  Waited(mu, 0, [&] {
    real(this, mu);
    return true;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  TS_REAL(bool (*)(CondVar*, Mutex*, Duration),
          "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE", this, mu,
          timeout);
  return Waited(mu, 0, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  TS_REAL(bool (*)(CondVar*, Mutex*, Time),
          "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE", this, mu, deadline);
  return Waited(mu, 0, [&] { return real(this, mu, deadline); });
}

// Notify happens before every wait that returns notified. (HasBeenNotified
// is inline and reads an atomic the library stores: a thread that only polls
// it is not ordered after Notify.)
void Notification::Notify() {
  TS_REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv", this);
  __tsan_release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  TS_REAL(void (*)(const Notification*), "_ZNK4absl7debian312Notification19WaitForNotificationEv",
          this);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  TS_REAL(bool (*)(const Notification*, Duration),
          "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_"
          "8DurationE",
          this, timeout);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  TS_REAL(bool (*)(const Notification*, Time),
          "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0"
          "_4TimeE",
          this, deadline);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

}  // namespace absl
