// Naming the field that makes a request body unparsable (server/serving/wire_diagnosis.h).
#include "server/serving/wire_diagnosis.h"

#include <random>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "ratelimit/v1/ratelimit.pb.h"

namespace ratelimit {
namespace {

// A serialized request of two limits whose second key is `key` (spliced in after serializing,
// so that protobuf's own writer never sees bytes it would refuse).
std::string TwoLimitsWithSecondKey(const std::string& key) {
  v1::RateLimitRequest r;
  r.set_request_id("req-1");
  v1::LimitRequest* a = r.add_limits();
  a->set_name("api");
  a->set_key("alice");
  v1::LimitRequest* b = r.add_limits();
  b->set_name("jobs");
  b->set_key(std::string(key.size(), 'Q'));
  b->mutable_config()->mutable_period()->set_seconds(1);
  std::string bytes = r.SerializeAsString();
  bytes.replace(bytes.find(std::string(key.size(), 'Q')), key.size(), key);
  return bytes;
}

const google::protobuf::Descriptor& Request() { return *v1::RateLimitRequest::descriptor(); }

TEST(WireDiagnosisTest, ANonUtf8StringIsNamedByItsPath) {
  const std::string bytes = TwoLimitsWithSecondKey("k\xff\xfe");
  v1::RateLimitRequest parsed;
  ASSERT_FALSE(parsed.ParseFromString(bytes)) << "protobuf refuses it: the case diagnosed";
  EXPECT_EQ(DiagnoseWireFormat(Request(), bytes), "limits[1].key: is not valid UTF-8");
}

TEST(WireDiagnosisTest, AValidBodyHasNoFault) {
  const std::string bytes = TwoLimitsWithSecondKey("k\xc3\xa9");  // "ké"
  v1::RateLimitRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(DiagnoseWireFormat(Request(), bytes), "");
}

TEST(WireDiagnosisTest, ACutShortFieldIsNamed) {
  // limits (field 1, length-delimited) claiming 127 bytes of the 1 that follow.
  EXPECT_EQ(DiagnoseWireFormat(Request(), std::string("\x0a\x7f\x01", 3)),
            "limits[0]: is cut short (its length runs past the body)");
  // Nested: limits[0].config.period.seconds (field 1 of a Duration) cut short inside its varint.
  EXPECT_EQ(DiagnoseWireFormat(Request(), std::string("\x0a\x05\x22\x03\x1a\x01\x08", 7)),
            "limits[0].config.period.seconds: is cut short");
}

TEST(WireDiagnosisTest, UnknownFieldsAreSkippedAndAFaultOutsideAnyFieldIsNotNamed) {
  // Field 15 (unknown to this version) as a varint, then a valid request_id.
  EXPECT_EQ(DiagnoseWireFormat(Request(), std::string("\x78\x01\x12\x01x", 5)), "");
  // request_id (field 2, a string) sent as a varint: an unknown field to the parser too.
  v1::RateLimitRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(std::string("\x10\x05", 2)));
  EXPECT_EQ(DiagnoseWireFormat(Request(), std::string("\x10\x05", 2)), "");
  // ... but cut short, it is named.
  EXPECT_EQ(DiagnoseWireFormat(Request(), std::string("\x10\xff", 2)),
            "request_id: is cut short or malformed");
  // A tag whose varint never ends.
  EXPECT_EQ(DiagnoseWireFormat(Request(), std::string("\xff\xff\xff", 3)), "");
}

TEST(WireDiagnosisTest, UnparsableBodyMessageLeadsWithTheFieldOrNamesTheType) {
  const std::string bad = TwoLimitsWithSecondKey("\xc0\xaf");  // an overlong '/'
  grpc::Slice slice(bad.data(), bad.size());
  EXPECT_EQ(UnparsableBodyMessage(Request(), grpc::ByteBuffer(&slice, 1)),
            "limits[1].key: is not valid UTF-8 (request body is not a valid "
            "ratelimit.v1.RateLimitRequest)");
  grpc::Slice garbage("\xff\xff\xff", 3);
  EXPECT_EQ(UnparsableBodyMessage(Request(), grpc::ByteBuffer(&garbage, 1)),
            "request body is not a valid ratelimit.v1.RateLimitRequest (protobuf wire format)");
}

// Mutated bodies (bytes flipped, cut short, spliced; a fixed seed): a fault is named only in a
// body protobuf refuses, and a body protobuf parses has none. Run under the sanitizers too.
TEST(WireDiagnosisTest, NamesAFaultOnlyWhereTheParserRefuses) {
  const std::string valid = TwoLimitsWithSecondKey("k\xc3\xa9");
  const google::protobuf::LogSilencer quiet;  // protobuf logs each non-UTF-8 string it refuses
  std::mt19937 random(7);
  int refused = 0;
  int named = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = valid;
    const int edits = 1 + static_cast<int>(random() % 3);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t at = random() % bytes.size();
      switch (random() % 3) {
        case 0:
          bytes[at] = static_cast<char>(random() & 0xFF);
          break;
        case 1:
          bytes.resize(at);
          break;
        default:
          bytes.insert(at, 1, static_cast<char>(random() & 0xFF));
          break;
      }
    }
    v1::RateLimitRequest parsed;
    const bool ok = parsed.ParseFromString(bytes);
    const std::string fault = DiagnoseWireFormat(Request(), bytes);
    if (ok) {
      ASSERT_EQ(fault, "") << "a body protobuf parses: " << i;
    } else {
      ++refused;
      named += fault.empty() ? 0 : 1;
    }
  }
  // Most refusals are a field's (the mutations land inside fields far more often than in tags).
  EXPECT_GT(refused, 1000);
  EXPECT_GT(named, refused / 2);
}

// Each way a key can fail to be UTF-8 is named (the walk uses the parser's own check), and
// well-formed ones, up to U+10FFFF, are not.
TEST(WireDiagnosisTest, EachWayAStringCanFailToBeUtf8IsNamed) {
  for (const std::string& valid : {std::string(""), std::string("plain ascii"),
                                   std::string("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),  // é € 😀
                                   std::string("\xf4\x8f\xbf\xbf")}) {                   // U+10FFFF
    EXPECT_EQ(DiagnoseWireFormat(Request(), TwoLimitsWithSecondKey(valid)), "") << valid;
  }
  for (const std::string& invalid : {std::string("\x80"),              // a continuation first
                                     std::string("\xc3"),              // cut short
                                     std::string("\xc3x"),             // not a continuation
                                     std::string("\xc0\xaf"),          // overlong
                                     std::string("\xe0\x80\xaf"),      // overlong
                                     std::string("\xed\xa0\x80"),      // a surrogate
                                     std::string("\xf4\x90\x80\x80"),  // past U+10FFFF
                                     std::string("\xff")}) {
    EXPECT_EQ(DiagnoseWireFormat(Request(), TwoLimitsWithSecondKey(invalid)),
              "limits[1].key: is not valid UTF-8")
        << invalid;
  }
}

}  // namespace
}  // namespace ratelimit
