#include "storage/redis/cluster/redis_slot.h"

#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ratelimit::redis {
namespace {

constexpr std::array<uint16_t, 256> MakeTable() {
  std::array<uint16_t, 256> table{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint16_t, 256> kTable = MakeTable();

}  // namespace

uint16_t Crc16(absl::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kTable[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

absl::string_view HashTagOf(absl::string_view key) {
  const size_t open = key.find('{');
  if (open == absl::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == absl::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

int KeySlot(absl::string_view key) { return Crc16(HashTagOf(key)) & (kSlotCount - 1); }

absl::string_view SlotTag(int slot) {
  static const std::vector<std::string>* const tags = [] {
    auto* out = new std::vector<std::string>(kSlotCount);
    int missing = kSlotCount;
    for (uint64_t n = 0; missing > 0; ++n) {
      std::string tag = absl::StrCat(n);
      std::string& at = (*out)[Crc16(tag) & (kSlotCount - 1)];
      if (!at.empty()) continue;
      at = std::move(tag);
      --missing;
    }
    return out;
  }();
  return (*tags)[slot];
}

}  // namespace ratelimit::redis
