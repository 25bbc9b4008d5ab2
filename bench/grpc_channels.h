#ifndef RATELIMIT_BENCH_GRPC_CHANNELS_H_
#define RATELIMIT_BENCH_GRPC_CHANNELS_H_

// The load generators' connections and threads: each channel its own HTTP/2 connection,
// connected before the load starts; slot s of the calls in flight on channel s % channels and
// thread s % threads, each thread driving its slots.

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace ratelimit::bench {

// `count` insecure channels to `target`, each connected (within 5 s), in `*channels`. A local
// subchannel pool per channel: otherwise channels with the same target and arguments share one
// connection. False, after saying why on stderr, when one cannot connect.
inline bool ConnectChannels(const std::string& target, int count,
                            std::vector<std::shared_ptr<grpc::Channel>>* channels) {
  for (int i = 0; i < count; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels->push_back(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
    if (!channels->back()->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(5)))) {
      std::fprintf(stderr, "cannot connect to %s\n", target.c_str());
      return false;
    }
  }
  return true;
}

// Runs one worker per thread: `make_worker(t, stubs)` makes thread t's worker (a class with
// Run()) given the stubs of its slots (slot s of `concurrency` uses stubs[s % stubs.size()] and
// thread s % num_threads); every Run() is called on a thread of its own, and joined. Returns
// the workers, for their tallies. REQUIRES: 1 <= num_threads <= concurrency, !stubs.empty().
template <typename Stub, typename MakeWorker>
auto RunWorkers(const std::vector<std::unique_ptr<Stub>>& stubs, int concurrency, int num_threads,
                MakeWorker make_worker) {
  std::vector<decltype(make_worker(0, std::vector<Stub*>()))> workers;
  for (int t = 0; t < num_threads; ++t) {
    std::vector<Stub*> slot_stubs;
    for (int s = t; s < concurrency; s += num_threads) {
      slot_stubs.push_back(stubs[s % stubs.size()].get());
    }
    workers.push_back(make_worker(t, std::move(slot_stubs)));
  }
  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&w] { w->Run(); });
  for (std::thread& t : threads) t.join();
  return workers;
}

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_GRPC_CHANNELS_H_
