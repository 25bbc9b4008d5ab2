// LeaseId (storage/leases/lease_id.h): parsed from exactly 32 lowercase hex digits (every byte
// beside the digits' ranges refused, and the all-zero id), written back to the same digits, its
// 16 bytes both ways, compared and ordered as its digits, and new ids unique and never empty.

#include "storage/leases/lease_id.h"

#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

constexpr char kId[] = "0123456789abcdef00ff10a9b8c7d6e5";

TEST(LeaseIdTest, ThirtyTwoLowercaseHexDigitsParseAndWriteBackTheSame) {
  const std::optional<LeaseId> id = LeaseId::Parse(kId);
  ASSERT_TRUE(id.has_value());
  EXPECT_FALSE(id->empty());
  EXPECT_EQ(id->high(), 0x0123456789abcdefu);
  EXPECT_EQ(id->low(), 0x00ff10a9b8c7d6e5u);
  EXPECT_EQ(id->ToString(), kId);
  char digits[LeaseId::kDigits];
  id->WriteDigits(digits);
  EXPECT_EQ(std::string(digits, sizeof(digits)), kId);
  std::ostringstream printed;
  printed << *id;
  EXPECT_EQ(printed.str(), kId);
}

TEST(LeaseIdTest, OtherLengthsAndTheAllZeroIdAreRefused) {
  EXPECT_FALSE(LeaseId::Parse(std::string(kId).substr(1)));
  EXPECT_FALSE(LeaseId::Parse(std::string(kId) + "0"));
  EXPECT_FALSE(LeaseId::Parse(""));
  EXPECT_FALSE(LeaseId::Parse(std::string(32, '0')));  // no lease's id
  EXPECT_TRUE(LeaseId::Parse(std::string(31, '0') + "1"));
}

TEST(LeaseIdTest, EveryByteOutsideTheDigitsIsRefusedAnywhereInTheId) {
  for (int c = 0; c < 256; ++c) {
    const bool digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    for (const size_t at : {size_t{0}, size_t{15}, size_t{16}, size_t{31}}) {
      std::string id = kId;
      id[at] = static_cast<char>(c);
      EXPECT_EQ(LeaseId::Parse(id).has_value(), digit) << "byte " << c << " at " << at;
    }
  }
}

TEST(LeaseIdTest, TheBytesAreTheDigitsPairedHighFirstAndGiveTheIdBack) {
  const LeaseId id = *LeaseId::Parse(kId);
  uint8_t bytes[LeaseId::kBytes];
  id.ToBytes(bytes);
  const uint8_t want[LeaseId::kBytes] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                                         0x00, 0xff, 0x10, 0xa9, 0xb8, 0xc7, 0xd6, 0xe5};
  for (size_t i = 0; i < LeaseId::kBytes; ++i) EXPECT_EQ(bytes[i], want[i]) << i;
  EXPECT_EQ(LeaseId::FromBytes(want), id);
}

TEST(LeaseIdTest, IdsAreEqualOnlyWhenBothWordsAreAndOrderAsTheirDigits) {
  const LeaseId id = *LeaseId::Parse(kId);
  EXPECT_EQ(id, *LeaseId::Parse(std::string(kId)));
  std::string last_differs = kId;
  last_differs.back() = '0';
  EXPECT_NE(id, *LeaseId::Parse(last_differs));  // the first word agrees
  EXPECT_NE(id, *LeaseId::Parse("1" + std::string(kId).substr(1)));
  EXPECT_NE(absl::HashOf(id), absl::HashOf(*LeaseId::Parse(last_differs)));
  // Ordered as their digits: by the first word, then by the second.
  const std::string ordered[] = {
      "00000000000000010000000000000000", "0000000000000001ffffffffffffffff",
      "00000000000000020000000000000000", kId, "f0000000000000000000000000000000"};
  for (size_t i = 0; i + 1 < std::size(ordered); ++i) {
    EXPECT_LT(*LeaseId::Parse(ordered[i]), *LeaseId::Parse(ordered[i + 1])) << ordered[i];
    EXPECT_FALSE(*LeaseId::Parse(ordered[i + 1]) < *LeaseId::Parse(ordered[i])) << ordered[i];
  }
  EXPECT_TRUE(LeaseId().empty());
  EXPECT_EQ(LeaseId().ToString(), "");
  EXPECT_EQ(LeaseId::FromWords(0, 0), LeaseId());
}

TEST(LeaseIdTest, NewIdsAreUniqueAndNeverEmpty) {
  // Ids come from a per-thread pool refilled every 1,024: 3,000 ids cross several refills.
  std::set<LeaseId> ids;
  for (int i = 0; i < 3000; ++i) {
    const LeaseId id = LeaseId::New();
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(LeaseId::Parse(id.ToString()), id);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 3000u);
  // Another thread draws from a pool of its own.
  LeaseId other;
  std::thread([&] { other = LeaseId::New(); }).join();
  EXPECT_EQ(ids.count(other), 0u);
}

}  // namespace
}  // namespace ratelimit
