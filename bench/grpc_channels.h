#ifndef RATELIMIT_BENCH_GRPC_CHANNELS_H_
#define RATELIMIT_BENCH_GRPC_CHANNELS_H_

// The load generators' connections: each channel its own HTTP/2 connection, connected before the
// load starts.

#include <cstdio>
#include <memory>
#include <string>
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

}  // namespace ratelimit::bench

#endif  // RATELIMIT_BENCH_GRPC_CHANNELS_H_
