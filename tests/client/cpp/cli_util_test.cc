// What the ratelimit CLI does with --timeout, with transport errors, and how it writes an error
// as JSON (client/cpp/cli_util.h, client/cpp/output.h).
#include "client/cpp/cli_util.h"

#include <string>

#include "client/cpp/output.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

TEST(ParseTimeoutTest, TakesADurationOrPlainSeconds) {
  EXPECT_EQ(*ParseTimeout("5"), absl::Seconds(5));
  EXPECT_EQ(*ParseTimeout("0.5"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseTimeout("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseTimeout("2m"), absl::Minutes(2));
  for (const char* bad : {"5x", "", "0", "-1", "0s", "inf", "nan"}) {
    absl::StatusOr<absl::Duration> d = ParseTimeout(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(d.status().message().rfind("--timeout: ", 0), 0u) << d.status();
  }
}

TEST(TransportHintTest, PlaintextToATlsPortAndTheReverseGetAHint) {
  const absl::Status closed = absl::UnavailableError("Socket closed");
  EXPECT_NE(WithTransportHint(closed, /*tls=*/false).message().find("add --tls"),
            std::string::npos);
  EXPECT_EQ(WithTransportHint(closed, /*tls=*/true), closed);
  const absl::Status handshake = absl::UnavailableError("Ssl handshake failed: SSL_ERROR_SSL");
  EXPECT_NE(WithTransportHint(handshake, /*tls=*/true).message().find("drop --tls"),
            std::string::npos);
  EXPECT_EQ(WithTransportHint(handshake, /*tls=*/false), handshake);
  const absl::Status other = absl::NotFoundError("Socket closed");  // not a transport failure
  EXPECT_EQ(WithTransportHint(other, false), other);
}

TEST(FormatJsonErrorTest, WritesCodeThenMessageAsValidJson) {
  const absl::Status error = absl::NotFoundError("name: no limit \"x\"\n\tin the limits file");
  const std::string json = FormatJsonError(error);
  EXPECT_EQ(json.rfind("{\"error\":{\"code\":\"NOT_FOUND\",\"message\":", 0), 0u) << json;
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  const auto& e = parsed.fields().at("error").struct_value().fields();
  EXPECT_EQ(e.at("code").string_value(), "NOT_FOUND");
  EXPECT_EQ(e.at("message").string_value(), error.message());
}

}  // namespace
}  // namespace ratelimit
