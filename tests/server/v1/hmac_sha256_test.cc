// HMAC-SHA256 with the key absorbed once (server/hmac_sha256.h).
#include "server/v1/hmac_sha256.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace ratelimit {
namespace {

std::string Hex(const HmacSha256::Digest& d) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

std::string Reference(absl::string_view key, absl::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(out), len));
}

// The published test cases of RFC 4231 (section 4): short, textual, repeated-byte keys and a key
// longer than the SHA-256 block, which must be hashed first.
TEST(HmacSha256Test, MatchesTheRfc4231TestCases) {
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b')).Mac("Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(Hex(HmacSha256("Jefe").Mac("what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\xaa')).Mac(std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  const HmacSha256 long_key(std::string(131, '\xaa'));
  EXPECT_EQ(Hex(long_key.Mac("Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(Hex(long_key.Mac("This is a test using a larger than block-size key and a larger "
                             "than block-size data. The key needs to be hashed before being "
                             "used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

// Every key length around the block size (0..130) and every message length around the padding
// and block boundaries (0..200), against OpenSSL's one-shot HMAC.
TEST(HmacSha256Test, AgreesWithOpenSslForEveryKeyAndMessageLengthAroundTheBlocks) {
  std::mt19937 rng(20261127);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  for (size_t key_len = 0; key_len <= 130; ++key_len) {
    const std::string key = random_bytes(key_len);
    const HmacSha256 mac(key);
    for (size_t msg_len = 0; msg_len <= 200; msg_len += (key_len % 7) + 1) {
      const std::string message = random_bytes(msg_len);
      ASSERT_EQ(Hex(mac.Mac(message)), Reference(key, message))
          << "key " << key_len << " bytes, message " << msg_len << " bytes";
    }
  }
}

TEST(HmacSha256Test, OneKeyMacsEachMessageIndependentlyOfThoseBefore) {
  // Each MAC starts from the keyed state: nothing of an earlier message carries over.
  const HmacSha256 mac("a key of the receipts");
  const std::string first = Hex(mac.Mac("message one"));
  EXPECT_NE(Hex(mac.Mac("message two")), first);
  EXPECT_EQ(Hex(mac.Mac("message one")), first);
  const HmacSha256 copy = mac;
  EXPECT_EQ(Hex(copy.Mac("message one")), first);
  EXPECT_NE(Hex(HmacSha256("another key").Mac("message one")), first);
}

TEST(HmacSha256Test, ThreadsShareOneKey) {
  const std::string key(32, 'k');
  const HmacSha256 mac(key);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string message = "thread " + std::to_string(t) + " message " + std::to_string(i);
        if (Hex(mac.Mac(message)) != Reference(key, message)) ++mismatches[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace ratelimit
