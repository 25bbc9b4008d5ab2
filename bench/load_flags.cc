#include "bench/load_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, target, "127.0.0.1:8081", "server address");
ABSL_FLAG(int, concurrency, 64, "calls kept in flight");
ABSL_FLAG(int, channels, 1, "gRPC channels (HTTP/2 connections)");
ABSL_FLAG(int, threads, 2, "client threads, each with its own CompletionQueue");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "measured time, after the warm-up");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1), "time before measuring");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(5), "deadline of each call");
ABSL_FLAG(int64_t, keys, 1, "distinct keys: 1 = one hot key \"hot\"; N > 1 = key-0..key-<N-1>");
ABSL_FLAG(bool, json, false, "print one JSON object instead of text");
