// The wire-format helpers the OTLP spans are written with (server/observability/protowire.h),
// checked against protobuf's own encoder.
#include "server/observability/protowire.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/io/coded_stream.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

std::string ProtobufVarint(uint64_t v) {
  uint8_t buf[10];  // the longest varint
  uint8_t* end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(v, buf);
  return std::string(reinterpret_cast<char*>(buf), static_cast<size_t>(end - buf));
}

TEST(ProtowireTest, VarintsAreEncodedAsProtobufEncodesThem) {
  std::mt19937_64 rng(20261127);
  std::vector<uint64_t> values = {0,
                                  1,
                                  127,
                                  128,
                                  300,
                                  16383,
                                  16384,
                                  uint64_t{1} << 32,
                                  (uint64_t{1} << 63) - 1,
                                  uint64_t{1} << 63,
                                  std::numeric_limits<uint64_t>::max()};
  for (int i = 0; i < 1000; ++i) values.push_back(rng() >> (rng() % 64));
  for (uint64_t v : values) {
    std::string out = "prefix";
    protowire::PutVarint(out, v);
    EXPECT_EQ(out, "prefix" + ProtobufVarint(v)) << v;
  }
}

}  // namespace
}  // namespace ratelimit
