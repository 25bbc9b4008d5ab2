#ifndef RATELIMIT_STORAGE_WORKER_THREAD_H_
#define RATELIMIT_STORAGE_WORKER_THREAD_H_

// How the server's long-lived threads present themselves to the kernel.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ratelimit {

// Whether a worker thread runs under the kernel's default policy or SCHED_BATCH.
//
// The serving loops and the Redis client's I/O thread hand work to each other: a loop thread
// queues a burst's commands and wakes the I/O thread, which later finishes the calls and so wakes
// the loop. Under the default policy a thread that has slept preempts the one that woke it at
// once, so on a busy core each wake-up cuts the waker's burst short and the two threads take turns
// call by call (measured on one core with Redis: 0.7-0.8 context switches per call). Under
// SCHED_BATCH a woken thread waits for the running one to block or use its slice, so each thread
// finishes everything it has before the other runs (0.02 per call). It costs no priority (the
// nice value is kept) and needs no privilege. Its price: a woken batch thread does not preempt
// unrelated work on its CPU either, so on CPUs shared with other busy processes a call may wait
// up to a scheduler slice longer.
enum class WorkerScheduling { kDefault, kBatch };

// Names the calling thread `name`, cut to the 15 bytes Linux keeps (shown by top -H and in
// /proc/PID/task/TID/comm).
void NameWorkerThread(absl::string_view name);

// Names the calling thread (NameWorkerThread) and, for kBatch, moves it to SCHED_BATCH (kDefault
// leaves its policy as it is, e.g. as `chrt` set it for the process). The name is always set; an
// error (the policy was refused, e.g. by a seccomp profile) leaves the thread's policy as it was
// and is returned for the caller to log.
absl::Status SetUpWorkerThread(absl::string_view name, WorkerScheduling scheduling);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_WORKER_THREAD_H_
