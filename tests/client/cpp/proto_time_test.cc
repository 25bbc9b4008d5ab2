// The well-known time messages as the client reads and writes them (client/cpp/proto_time.h).
#include "client/cpp/proto_time.h"

#include "gtest/gtest.h"

namespace ratelimit {
namespace {

google::protobuf::Duration DurationOf(absl::Duration d) {
  google::protobuf::Duration out;
  SetProtoDuration(d, &out);
  return out;
}

TEST(ProtoTimeTest, ADurationKeepsItsMicrosecondsAsSecondsAndNanos) {
  const google::protobuf::Duration d = DurationOf(absl::Seconds(90) + absl::Microseconds(250));
  EXPECT_EQ(d.seconds(), 90);
  EXPECT_EQ(d.nanos(), 250000);
}

TEST(ProtoTimeTest, ADurationDropsWhatIsFinerThanAMicrosecond) {
  const google::protobuf::Duration d = DurationOf(absl::Milliseconds(1) + absl::Nanoseconds(999));
  EXPECT_EQ(d.seconds(), 0);
  EXPECT_EQ(d.nanos(), 1000000);
}

TEST(ProtoTimeTest, ANegativeDurationHasSecondsAndNanosOfOneSign) {
  const google::protobuf::Duration d = DurationOf(-absl::Milliseconds(1500));
  EXPECT_EQ(d.seconds(), -1);
  EXPECT_EQ(d.nanos(), -500000000);
}

TEST(ProtoTimeTest, AnInstantKeepsItsNanos) {
  google::protobuf::Timestamp t;
  t.set_seconds(1796367600);
  t.set_nanos(123456789);
  EXPECT_EQ(TimeOf(t), absl::FromUnixSeconds(1796367600) + absl::Nanoseconds(123456789));
}

TEST(ProtoTimeTest, AnInstantPrintsInUtcWithTheDigitsItHas) {
  google::protobuf::Timestamp t;
  t.set_seconds(1796367600);  // 2026-12-04T07:00:00Z
  EXPECT_EQ(Rfc3339(t), "2026-12-04T07:00:00Z");
  t.set_nanos(250000000);
  EXPECT_EQ(Rfc3339(t), "2026-12-04T07:00:00.25Z");
}

}  // namespace
}  // namespace ratelimit
