#include "storage/worker_thread.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace ratelimit {

void NameWorkerThread(absl::string_view name) {
  const std::string short_name(name.substr(0, 15));
  pthread_setname_np(pthread_self(), short_name.c_str());
}

absl::Status SetUpWorkerThread(absl::string_view name, WorkerScheduling scheduling) {
  NameWorkerThread(name);
  if (scheduling == WorkerScheduling::kDefault) return absl::OkStatus();
  sched_param param{};
  param.sched_priority = 0;                               // the only one SCHED_BATCH takes
  if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) {  // 0: the calling thread
    const int error = errno;
    std::string message = absl::StrCat("SCHED_BATCH for thread ", name, ": ", std::strerror(error));
    return error == EPERM ? absl::PermissionDeniedError(message) : absl::InternalError(message);
  }
  return absl::OkStatus();
}

}  // namespace ratelimit
