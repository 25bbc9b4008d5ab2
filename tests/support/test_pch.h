// The precompiled header of the test suite (tests/CMakeLists.txt, RATELIMIT_PCH): third-party and
// generated headers only, those most test files include, so that the suite parses them once.
// A header of the project does not belong here: a change to it would recompile every test.
// Every test still includes what it uses; this file only makes that cheaper.
#ifndef RATELIMIT_TESTS_SUPPORT_TEST_PCH_H_
#define RATELIMIT_TESTS_SUPPORT_TEST_PCH_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.grpc.pb.h"

#endif  // RATELIMIT_TESTS_SUPPORT_TEST_PCH_H_
