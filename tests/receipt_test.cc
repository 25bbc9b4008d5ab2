// Receipt encoding, signing and the receipt key file (server/receipt.h).
#include "server/receipt.h"

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

const std::string kHexKey(64, 'c');

Receipt Inline() {
  Receipt r;
  r.source = LimitSource::kInline;
  r.mode = Mode::kReserve;
  r.name = "llm";
  r.key = "org-7";
  r.count = 4000;
  r.decided_at_us = 1700000000000000;
  r.unique_id = NewReceiptId();
  LimitConfig c;
  c.kind = LimitKind::kFixedWindow;
  c.rate = 100000;
  c.period_us = 60000000;
  c.capacity = 150000;
  c.max_reserved = 5000;
  c.start_us = 0;
  c.jitter = 0.25;
  r.config = c;
  return r;
}

TEST(ReceiptTest, SignedReceiptVerifiesToWhatWasSigned) {
  auto keys = ReceiptKeys::Parse(kHexKey);
  ASSERT_OK(keys);
  const Receipt r = Inline();
  auto back = keys->Verify(keys->Sign(r), "settlements[0].receipt");
  ASSERT_OK(back);
  EXPECT_EQ(*back, r);
  Receipt defined = r;
  defined.source = LimitSource::kDefined;
  defined.mode = Mode::kConsume;
  defined.config.reset();
  auto back2 = keys->Verify(keys->Sign(defined), "f");
  ASSERT_OK(back2);
  EXPECT_EQ(*back2, defined);
}

TEST(ReceiptTest, TruncatedOrExtendedReceiptIsRefused) {
  auto keys = ReceiptKeys::Parse(kHexKey);
  ASSERT_OK(keys);
  const std::string signed_receipt = keys->Sign(Inline());
  for (size_t n = 0; n < signed_receipt.size(); ++n) {
    auto v = keys->Verify(signed_receipt.substr(0, n), "settlements[3].receipt");
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("settlements[3].receipt"), std::string::npos);
  }
  EXPECT_FALSE(keys->Verify(signed_receipt + "x", "f").ok());
}

TEST(ReceiptTest, ReceiptIdsAreUnique) {
  EXPECT_NE(NewReceiptId(), NewReceiptId());
  EXPECT_NE(NewReceiptKey(), NewReceiptKey());
  EXPECT_EQ(NewReceiptKey().size(), 32u);
}

TEST(ReceiptKeyFileTest, ParsesHexAndBase64WithCommentsAndPreviousKeys) {
  const std::string b64 = absl::Base64Escape(std::string(40, 'k'));
  auto keys = ReceiptKeys::Parse("# current\n" + kHexKey + "\n\n  " + b64 + "  \n");
  ASSERT_OK(keys);
  EXPECT_EQ(keys->size(), 2u);
  // A receipt of the previous key verifies under the rotated set.
  auto old = ReceiptKeys::Parse(b64);
  ASSERT_OK(old);
  EXPECT_OK(keys->Verify(old->Sign(Inline()), "f"));
}

TEST(ReceiptKeyFileTest, BadFilesAreRefusedNamingTheLine) {
  for (const auto& [file, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "no key"},
           {"# only a comment\n", "no key"},
           {"abcd\n", "line 1"},
           {kHexKey + "\nnot*base64*or*hex\n", "line 2"},
           {std::string(62, 'a') + "\n", "line 1"}}) {
    auto keys = ReceiptKeys::Parse(file);
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument) << file;
    EXPECT_NE(keys.status().message().find(why), std::string::npos) << keys.status();
  }
}

}  // namespace
}  // namespace ratelimit
