// storage/byte_codec.h: fixed-width little-endian numbers and varints, written at a cursor and
// read back with every read bounded by what is left.

#include "storage/byte_codec.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ratelimit {
namespace {

TEST(ByteCodecTest, FixedNumbersAreLittleEndian) {
  char bytes[8];
  StoreFixed64(bytes, 0x0102030405060708u);
  EXPECT_EQ(std::string(bytes, 8), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(LoadFixed64(bytes), 0x0102030405060708u);
  StoreFixed32(bytes, 0xa1b2c3d4u);
  EXPECT_EQ(std::string(bytes, 4), std::string("\xd4\xc3\xb2\xa1", 4));
  EXPECT_EQ(LoadFixed32(bytes), 0xa1b2c3d4u);
}

TEST(ByteCodecTest, VarintsTakeSevenBitsAByteLowGroupsFirst) {
  const std::vector<std::pair<uint64_t, std::string>> cases = {
      {0, std::string(1, '\0')},
      {1, "\x01"},
      {127, "\x7f"},
      {128, "\x80\x01"},
      {300, "\xac\x02"},
      {std::numeric_limits<uint64_t>::max(), "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
  };
  for (const auto& [value, wire] : cases) {
    EXPECT_EQ(VarintBytes(value), wire.size()) << value;
    std::string out(wire.size(), '?');
    ByteWriter w(out.data());
    w.Varint(value);
    EXPECT_EQ(w.at(), out.data() + out.size()) << value;
    EXPECT_EQ(out, wire) << value;
    ByteReader r(wire);
    uint64_t read = 7;
    ASSERT_TRUE(r.Varint(read)) << value;
    EXPECT_EQ(read, value);
    EXPECT_EQ(r.left(), 0u);
  }
}

TEST(ByteCodecTest, AWriterFillsExactlyWhatItsFieldsTake) {
  std::string out(1 + 4 + 8 + 2 + 5, '?');
  ByteWriter w(out.data());
  w.U8(9);
  w.Fixed32(70000);
  w.Fixed64(static_cast<uint64_t>(int64_t{-2}));
  w.Varint(200);
  w.Bytes("hello");
  EXPECT_EQ(w.at(), out.data() + out.size());

  ByteReader r(out);
  uint8_t u8 = 0;
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  uint64_t v = 0;
  absl::string_view bytes;
  ASSERT_TRUE(r.U8(u8) && r.Fixed32(u32) && r.Fixed64(u64) && r.Varint(v) && r.Bytes(5, bytes));
  EXPECT_EQ(u8, 9);
  EXPECT_EQ(u32, 70000u);
  EXPECT_EQ(static_cast<int64_t>(u64), -2);
  EXPECT_EQ(v, 200u);
  EXPECT_EQ(bytes, "hello");
  EXPECT_EQ(r.left(), 0u);
}

TEST(ByteCodecTest, AReadPastTheEndFailsAndLeavesTheInputAsItWas) {
  const std::string three("abc");
  ByteReader r(three);
  uint32_t u32 = 0;
  uint64_t u64 = 0;
  absl::string_view bytes;
  EXPECT_FALSE(r.Fixed32(u32));
  EXPECT_FALSE(r.Fixed64(u64));
  EXPECT_FALSE(r.Bytes(4, bytes));
  EXPECT_EQ(r.rest(), "abc");

  // A varint whose last byte is missing, and one longer than 10 bytes.
  const std::string unfinished("\x80\x80", 2);
  ByteReader cut(unfinished);
  EXPECT_FALSE(cut.Varint(u64));
  EXPECT_EQ(cut.left(), 2u);
  const std::string eleven = std::string(10, '\x80') + "\x01";
  ByteReader longer(eleven);
  EXPECT_FALSE(longer.Varint(u64));
  EXPECT_EQ(longer.left(), 11u);

  // A string whose length is more than what follows.
  std::string s = "kept";
  const std::string five_promised(
      "\x05"
      "abcd",
      5);
  ByteReader short_string(five_promised);
  EXPECT_FALSE(short_string.VarintString(s));
  EXPECT_EQ(s, "kept");
  EXPECT_EQ(short_string.left(), 5u);
  const std::string four(
      "\x04"
      "abcd",
      5);
  ByteReader whole(four);
  ASSERT_TRUE(whole.VarintString(s));
  EXPECT_EQ(s, "abcd");
  EXPECT_EQ(whole.left(), 0u);
}

}  // namespace
}  // namespace ratelimit
