#ifndef RATELIMIT_STORAGE_STORE_TRACE_H_
#define RATELIMIT_STORAGE_STORE_TRACE_H_

// How a store reports its round trips to a tracer without depending on the server's telemetry:
// the service installs a StoreTracer on its thread for the duration of a traced store call, and a
// store that talks to a remote backend (Redis) starts one CLIENT span per command it sends
// through CurrentStoreTracer(). With no tracer installed (an untraced or unsampled request),
// CurrentStoreTracer() is null and the store does nothing more than read a thread-local.

#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"

namespace ratelimit {

// One round trip to the backend, being recorded. It ends (with the current time) at End() or at
// its destruction, whichever comes first.
//
// Thread safety: thread-compatible; it may be handed to another thread (the one that receives
// the reply) and ended there.
class StoreSpan {
 public:
  virtual ~StoreSpan() = default;
  // REQUIRES: `key` is a literal.
  virtual void SetAttribute(const char* key, absl::string_view value) = 0;
  virtual void SetAttribute(const char* key, int64_t value) = 0;
  // Marks the span's status as an error with `message`.
  virtual void SetError(absl::string_view message) = 0;
  virtual void End() = 0;
};

// Starts the spans of the round trips of one store call, as children of that call's span.
//
// Thread safety: StartClientSpan is called on the thread that installed the tracer.
class StoreTracer {
 public:
  virtual ~StoreTracer() = default;
  // A CLIENT span named `name`, started now. REQUIRES: `name` is a literal.
  virtual std::unique_ptr<StoreSpan> StartClientSpan(const char* name) = 0;
};

// The tracer installed on the calling thread, or null.
StoreTracer* CurrentStoreTracer();

// Installs `tracer` (may be null) on the calling thread until destruction, then restores the one
// installed before. `tracer` is not owned and must outlive the scope.
class ScopedStoreTracer {
 public:
  explicit ScopedStoreTracer(StoreTracer* tracer);
  ~ScopedStoreTracer();
  ScopedStoreTracer(const ScopedStoreTracer&) = delete;
  ScopedStoreTracer& operator=(const ScopedStoreTracer&) = delete;

 private:
  StoreTracer* const previous_;
};

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_STORE_TRACE_H_
