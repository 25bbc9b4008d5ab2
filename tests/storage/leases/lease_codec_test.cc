// The stored form of a lease set (storage/leases/lease_codec.h): round trips, the exact layout,
// and malformed bytes (an id that is not a lease id's digits among them) refused.

#include <string>

#include "gtest/gtest.h"
#include "storage/leases/lease_codec.h"
#include "tests/support/lease_test_ids.h"

namespace ratelimit {
namespace {

LeaseSet Sample() {
  Lease a;
  a.id = *LeaseId::Parse("0123456789abcdef0123456789abcdef");
  a.count = 3;
  a.acquired_at_us = 1'700'000'000'000'000;
  a.expires_at_us = 1'700'000'030'000'000;
  a.request_id = "req-1";
  a.holder = "worker \xff\x00 7";
  Lease b;
  b.id = NamedId("b");
  b.count = int64_t{1'000'000'000};
  b.acquired_at_us = -5;
  b.expires_at_us = INT64_MAX;
  b.request_id = "r";
  b.released = true;
  return LeaseSet{{a, b}};
}

TEST(LeaseCodecTest, RoundTrips) {
  for (const LeaseSet& set : {LeaseSet{}, Sample()}) {
    absl::StatusOr<LeaseSet> decoded = DecodeLeaseSet(EncodeLeaseSet(set));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, set);
  }
}

TEST(LeaseCodecTest, LayoutIsFixedWidthLittleEndian) {
  EXPECT_EQ(EncodeLeaseSet(LeaseSet{}), std::string("\x01\x00\x00\x00\x00", 5));
  Lease l;
  l.id = NamedId("i");  // the bytes 69 00 .. 00
  l.count = 2;
  l.acquired_at_us = 0x0102;
  l.expires_at_us = 0x0304;
  l.released = true;
  l.request_id = "q";
  const std::string expected = std::string("\x01\x01\x00\x00\x00", 5) +  // version, 1 lease
                               std::string("\x01", 1) +                  // released
                               std::string("\x02\0\0\0\0\0\0\0", 8) +    // count
                               std::string("\x02\x01\0\0\0\0\0\0", 8) +  // acquired_at_us
                               std::string("\x04\x03\0\0\0\0\0\0", 8) +  // expires_at_us
                               std::string("\x20\0\0\0", 4) +            // id: 32 digits
                               "69" + std::string(30, '0') +
                               std::string("\x01\0\0\0q", 5) +  // request_id
                               std::string("\0\0\0\0", 4);      // holder
  EXPECT_EQ(EncodeLeaseSet(LeaseSet{{l}}), expected);
  EXPECT_EQ(EncodedLeaseSetSize(LeaseSet{{l}}), expected.size());
}

TEST(LeaseCodecTest, AppendWritesTheSameBytesAfterWhatIsThere) {
  std::string out = "header";
  AppendLeaseSet(Sample(), &out);
  EXPECT_EQ(out, "header" + EncodeLeaseSet(Sample()));
  EXPECT_EQ(out.size(), 6 + EncodedLeaseSetSize(Sample()));
}

TEST(LeaseCodecTest, MalformedBytesAreDataLossNeverACrash) {
  const std::string good = EncodeLeaseSet(Sample());
  // Every truncation, and every single trailing byte, is refused.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_EQ(DecodeLeaseSet(good.substr(0, n)).status().code(), absl::StatusCode::kDataLoss) << n;
  }
  EXPECT_EQ(DecodeLeaseSet(good + "x").status().code(), absl::StatusCode::kDataLoss);
  std::string bad = good;
  bad[0] = 2;  // unknown version
  EXPECT_EQ(DecodeLeaseSet(bad).status().code(), absl::StatusCode::kDataLoss);
  bad = good;
  bad[5] = 2;  // unknown flag
  EXPECT_EQ(DecodeLeaseSet(bad).status().code(), absl::StatusCode::kDataLoss);
  bad = good;
  bad[6] = 0;  // count 0
  bad[7] = bad[8] = 0;
  EXPECT_EQ(DecodeLeaseSet(bad).status().code(), absl::StatusCode::kDataLoss);
  bad = good;
  bad[13] = 1;  // count 3 + 2^56: more slots than any limit has
  EXPECT_EQ(DecodeLeaseSet(bad).status().code(), absl::StatusCode::kDataLoss);
  // A huge lease count or string length is refused without allocating for it.
  EXPECT_EQ(DecodeLeaseSet(std::string("\x01\xff\xff\xff\xff", 5)).status().code(),
            absl::StatusCode::kDataLoss);
  bad = good;
  bad[30] = bad[31] = bad[32] = bad[33] = '\xff';  // the first id's length
  EXPECT_EQ(DecodeLeaseSet(bad).status().code(), absl::StatusCode::kDataLoss);
  // An id that is not 32 lowercase hex digits, or is all zeros: no lease's.
  for (const std::string& id : {std::string("A") + std::string(31, '0'), std::string(32, '0')}) {
    bad = good;
    bad.replace(34, 32, id);
    EXPECT_EQ(DecodeLeaseSet(bad).status().code(), absl::StatusCode::kDataLoss) << id;
  }
  bad = good;
  bad[30] = 31;  // 31 digits, the 32nd read as the request_id's length
  EXPECT_EQ(DecodeLeaseSet(bad).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ratelimit
