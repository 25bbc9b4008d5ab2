// Receipt encoding, signing and the receipt key file (server/receipt.h).
#include "server/v1/receipt.h"

#include <openssl/hmac.h>

#include <set>
#include <thread>
#include <vector>

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
  r.value_after = 1250.5;
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

// The end of the receipts below, in both versions: Inline()'s name, key and config.
const std::string kNameKeyAndConfigHex =
    "03006c6c6d"          // "llm"
    "05006f72672d37"      // "org-7"
    "01"                  // has config
    "01"                  // fixed window
    "00000000006af840"    // rate 100000
    "0087930300000000"    // period 60 s
    "0100000000804f0241"  // capacity 150000
    "01000000000088b340"  // max_reserved 5000
    "010000000000000000"  // start 0
    "000000000000d03f";   // jitter 0.25

// The encoding documented in server/receipt.h, byte for byte, built and signed independently of
// the code under test: outstanding receipts must keep verifying across upgrades and restarts.
TEST(ReceiptTest, SignsTheDocumentedEncodingByteForByte) {
  auto keys = ReceiptKeys::Parse(kHexKey);
  ASSERT_OK(keys);
  Receipt r = Inline();
  for (uint8_t i = 0; i < 16; ++i) r.unique_id[i] = i;
  const std::string expected = absl::HexStringToBytes(
      "02c2f480d4dda9f452"                // version, key id
      "6902"                              // source 'i', mode reserve
      "000000000040af40"                  // count 4000
      "00401e18240a0600"                  // decided_at_us
      "00000000008a9340"                  // value_after 1250.5
      "000102030405060708090a0b0c0d0e0f"  // unique id
      + kNameKeyAndConfigHex +
      "82d6668768147508c6b60a10c6e4947cc11acdf50b3ab1bf0a862b0bcd2bb522");  // HMAC-SHA256
  EXPECT_EQ(absl::BytesToHexString(keys->Sign(r)), absl::BytesToHexString(expected));
  auto back = keys->Verify(expected, "receipt");
  ASSERT_OK(back);
  EXPECT_EQ(*back, r);
}

// A receipt signed before value_after was added (version 1) still verifies until it expires;
// it settles without the bound value_after gives (storage/algebra Settle).
TEST(ReceiptTest, AVersionOneReceiptStillVerifiesWithoutValueAfter) {
  auto keys = ReceiptKeys::Parse(kHexKey);
  ASSERT_OK(keys);
  Receipt r = Inline();
  r.value_after.reset();
  for (uint8_t i = 0; i < 16; ++i) r.unique_id[i] = i;
  const std::string expected = absl::HexStringToBytes(
      "01c2f480d4dda9f452"                // version, key id
      "6902"                              // source 'i', mode reserve
      "000000000040af40"                  // count 4000
      "00401e18240a0600"                  // decided_at_us
      "000102030405060708090a0b0c0d0e0f"  // unique id
      + kNameKeyAndConfigHex +
      "fe0dd6ed9464c1396c1e377172f36f699eed94b16d45a28b356b9977b94132eb");  // HMAC-SHA256
  auto back = keys->Verify(expected, "receipt");
  ASSERT_OK(back);
  EXPECT_EQ(*back, r);
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

TEST(ReceiptTest, ReceiptIdsAreUniqueAcrossThreads) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::vector<std::array<uint8_t, 16>>> drawn(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&drawn, t] {
      for (int i = 0; i < kPerThread; ++i) drawn[t].push_back(NewReceiptId());
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<std::array<uint8_t, 16>> all;
  for (const auto& ids : drawn) all.insert(ids.begin(), ids.end());
  EXPECT_EQ(all.size(), size_t{kThreads} * kPerThread);
}

// The receipt's last 32 bytes are HMAC-SHA256(key, everything before), computed here with
// OpenSSL's one-shot HMAC as an independent reference.
std::string ReferenceMac(const std::string& key, absl::string_view body) {
  unsigned char out[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

TEST(ReceiptTest, SignatureIsHmacSha256UnderTheCurrentKeyForEveryKeyInTurn) {
  // Several key sets signing in turn, twice round: every signature is the MAC under its own key.
  std::vector<std::string> secrets;
  std::vector<ReceiptKeys> key_sets;
  for (char c = 'a'; c < 'a' + 7; ++c) {
    secrets.emplace_back(32, c);
    key_sets.emplace_back(secrets.back(), std::vector<std::string>{});
  }
  Receipt r = Inline();
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < key_sets.size(); ++i) {
      ++r.decided_at_us;
      const std::string signed_receipt = key_sets[i].Sign(r);
      ASSERT_GT(signed_receipt.size(), 32u);
      const absl::string_view body(signed_receipt.data(), signed_receipt.size() - 32);
      EXPECT_EQ(signed_receipt.substr(body.size()), ReferenceMac(secrets[i], body))
          << "key " << i << " round " << round;
      ASSERT_OK(key_sets[i].Verify(signed_receipt, "receipt"));
      // Signed under another key: refused by every other key set.
      const ReceiptKeys& other = key_sets[(i + 1) % key_sets.size()];
      EXPECT_FALSE(other.Verify(signed_receipt, "receipt").ok());
    }
  }
}

TEST(ReceiptTest, APreviousKeyVerifiesWhatItSignedAfterRotation) {
  const std::string old_key(32, 'o'), new_key(32, 'n');
  const ReceiptKeys before(old_key, {});
  const ReceiptKeys after(new_key, {old_key});
  const std::string old_receipt = before.Sign(Inline());
  const std::string new_receipt = after.Sign(Inline());
  ASSERT_OK(after.Verify(old_receipt, "receipt"));
  ASSERT_OK(after.Verify(new_receipt, "receipt"));
  EXPECT_FALSE(before.Verify(new_receipt, "receipt").ok());
  // An altered byte anywhere fails the signature check under either key.
  std::string altered = old_receipt;
  altered[altered.size() / 2] ^= 1;
  EXPECT_FALSE(after.Verify(altered, "receipt").ok());
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
