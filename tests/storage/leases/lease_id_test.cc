// IsServerLeaseId, ServerLeaseIdBytes and ServerLeaseIdOfBytes (storage/leases/lease_id.h):
// exactly 32 lowercase hex digits, every byte beside the digits' ranges refused, and the 16 bytes
// an id stands for, both ways.

#include "storage/leases/lease_id.h"

#include <set>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace ratelimit {
namespace {

constexpr char kId[] = "0123456789abcdef00ff10a9b8c7d6e5";

TEST(LeaseIdTest, ThirtyTwoLowercaseHexDigitsAreAServerId) {
  EXPECT_TRUE(IsServerLeaseId(kId));
  EXPECT_FALSE(IsServerLeaseId(std::string(kId).substr(1)));
  EXPECT_FALSE(IsServerLeaseId(std::string(kId) + "0"));
  EXPECT_FALSE(IsServerLeaseId(""));
}

TEST(LeaseIdTest, EveryByteOutsideTheDigitsIsRefusedAnywhereInTheId) {
  for (int c = 0; c < 256; ++c) {
    const bool digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    for (const size_t at : {size_t{0}, size_t{17}, size_t{31}}) {
      std::string id = kId;
      id[at] = static_cast<char>(c);
      uint8_t bytes[kServerLeaseIdBytes];
      EXPECT_EQ(IsServerLeaseId(id), digit) << "byte " << c << " at " << at;
      EXPECT_EQ(ServerLeaseIdBytes(id, bytes), digit) << "byte " << c << " at " << at;
    }
  }
}

TEST(LeaseIdTest, TheBytesAreTheDigitsPairedHighFirstAndGiveTheIdBack) {
  uint8_t bytes[kServerLeaseIdBytes];
  ASSERT_TRUE(ServerLeaseIdBytes(kId, bytes));
  const uint8_t want[kServerLeaseIdBytes] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                                             0x00, 0xff, 0x10, 0xa9, 0xb8, 0xc7, 0xd6, 0xe5};
  for (size_t i = 0; i < kServerLeaseIdBytes; ++i) EXPECT_EQ(bytes[i], want[i]) << i;
  std::string back = "a longer string the id replaces";
  ServerLeaseIdOfBytes(want, &back);
  EXPECT_EQ(back, kId);
}

TEST(LeaseIdTest, NewIdsAreThirtyTwoHexDigitsAndUnique) {
  // Ids come from a per-thread pool refilled every 1,024: 3,000 ids cross several refills.
  std::set<std::string> ids;
  for (int i = 0; i < 3000; ++i) {
    const std::string id = NewLeaseId();
    EXPECT_EQ(id.size(), 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_NE(id, std::string(32, '0'));
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 3000u);
  // Another thread draws from a pool of its own.
  std::string other;
  std::thread([&] { other = NewLeaseId(); }).join();
  EXPECT_EQ(ids.count(other), 0u);
}

}  // namespace
}  // namespace ratelimit
