#include "storage/store_trace.h"

namespace ratelimit {
namespace {

thread_local StoreTracer* current_store_tracer = nullptr;

}  // namespace

StoreTracer* CurrentStoreTracer() { return current_store_tracer; }

ScopedStoreTracer::ScopedStoreTracer(StoreTracer* tracer) : previous_(current_store_tracer) {
  current_store_tracer = tracer;
}

ScopedStoreTracer::~ScopedStoreTracer() { current_store_tracer = previous_; }

}  // namespace ratelimit
