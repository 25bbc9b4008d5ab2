// A limit's definition and the bounds of what requests name (storage/limit_config.h): the
// checks every API shares, so each refuses the same input with the same message.
#include "storage/limit_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

using ::testing::HasSubstr;

TEST(LimitConfigTest, ASourceIsReadBackFromItsByteAndNoOtherByteIsOne) {
  for (const LimitSource source :
       {LimitSource::kDefined, LimitSource::kEnvoy, LimitSource::kInline}) {
    EXPECT_EQ(LimitSourceOfByte(static_cast<char>(source)), source);
  }
  int sources = 0;
  for (int byte = 0; byte < 256; ++byte) {
    if (LimitSourceOfByte(static_cast<char>(byte)).has_value()) ++sources;
  }
  EXPECT_EQ(sources, 3);
  EXPECT_FALSE(LimitSourceOfByte('D').has_value());
}

TEST(LimitConfigTest, ControlCharactersAreTheAsciiControlsAndDelete) {
  for (int c = 0; c < 256; ++c) {
    const std::string text = std::string("tenant") + static_cast<char>(c) + "a";
    EXPECT_EQ(ContainsControlCharacter(text), c < 0x20 || c == 0x7f) << "byte " << c;
  }
  EXPECT_FALSE(ContainsControlCharacter(""));
  EXPECT_FALSE(ContainsControlCharacter("caf\xc3\xa9 \xe2\x9c\x93"));  // UTF-8 passes
}

// The C1 controls in UTF-8 (0xc2 0x80..0x9f): U+0085 (next line) and U+009B (which starts a
// terminal escape sequence, as ESC [ does) are refused; U+00A0..U+00BF, printable, are not.
TEST(LimitConfigTest, C1ControlsInUtf8AreControlCharacters) {
  for (int c = 0x80; c <= 0xbf; ++c) {
    const std::string text = std::string("holder\xc2") + static_cast<char>(c) + "x";
    EXPECT_EQ(ContainsControlCharacter(text), c <= 0x9f) << "U+00" << std::hex << c;
  }
  EXPECT_TRUE(
      ContainsControlCharacter("job\xc2\x9b"
                               "31m"));
  EXPECT_FALSE(ContainsControlCharacter("\xc2"));  // a lone lead byte at the end is no control
}

TEST(LimitConfigTest, ANameIsRefusedEmptyTooLongOrWithControlCharactersNamingTheField) {
  EXPECT_TRUE(ValidateName("api", "limits[0].name").ok());
  EXPECT_TRUE(ValidateName(std::string(kMaxNameBytes, 'n'), "name").ok());

  const absl::Status empty = ValidateName("", "limits[2]", ".name");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("limits[2].name"));
  EXPECT_THAT(empty.message(), HasSubstr("must not be empty"));

  const absl::Status long_name = ValidateName(std::string(kMaxNameBytes + 1, 'n'), "name");
  EXPECT_EQ(long_name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_name.message(), HasSubstr("at most 256 bytes, got 257"));

  const absl::Status control = ValidateName(std::string("a\nb", 3), "name");
  EXPECT_EQ(control.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(control.message(), HasSubstr("name: must not contain control characters"));
}

TEST(LimitConfigTest, AConcurrencyLimitsLeaseTtlsDefaultAroundWhatItGives) {
  LimitConfig none;
  none.kind = LimitKind::kConcurrency;
  FillLeaseTtlDefaults(none);
  EXPECT_EQ(none.lease_ttl_us, kDefaultLeaseTtlMicros);
  EXPECT_EQ(none.max_lease_ttl_us, kDefaultMaxLeaseTtlMicros);

  LimitConfig long_ttl;
  long_ttl.kind = LimitKind::kConcurrency;
  long_ttl.lease_ttl_us = 2 * kDefaultMaxLeaseTtlMicros;
  FillLeaseTtlDefaults(long_ttl);
  EXPECT_EQ(long_ttl.max_lease_ttl_us, 2 * kDefaultMaxLeaseTtlMicros);

  // A lease_ttl past the bound: the max it brings stops at the bound, and the error names
  // lease_ttl, the field the caller gave, not max_lease_ttl.
  LimitConfig too_long;
  too_long.kind = LimitKind::kConcurrency;
  too_long.capacity = 1;
  too_long.lease_ttl_us = kMaxLeaseTtlMicros + 1;
  FillLeaseTtlDefaults(too_long);
  EXPECT_EQ(too_long.max_lease_ttl_us, kMaxLeaseTtlMicros);
  EXPECT_THAT(std::string(ValidateLimitConfig(too_long, "config.").message()),
              ::testing::HasSubstr("config.lease_ttl: must be between 1ms and max_lease_ttl (24h; "
                                   "max_lease_ttl is at most 1 day), got 24h0.000001s"));

  LimitConfig short_max;
  short_max.kind = LimitKind::kConcurrency;
  short_max.max_lease_ttl_us = 5000;
  FillLeaseTtlDefaults(short_max);
  EXPECT_EQ(short_max.lease_ttl_us, 5000);

  LimitConfig bucket;  // other kinds keep 0, which their validation requires
  FillLeaseTtlDefaults(bucket);
  EXPECT_EQ(bucket.lease_ttl_us, 0);
  EXPECT_EQ(bucket.max_lease_ttl_us, 0);
}

}  // namespace
}  // namespace ratelimit
