#include "server/serving/wire_diagnosis.h"

#include <cstdint>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/slice.h"

namespace ratelimit {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// Deeper than any request of ours nests (protobuf's own limit is 100).
constexpr int kMaxDepth = 32;

// The wire type a field of `field`'s type is sent with (packed repeated scalars aside).
WireFormatLite::WireType WireTypeOf(const FieldDescriptor& field) {
  return WireFormatLite::WireTypeForFieldType(static_cast<WireFormatLite::FieldType>(field.type()));
}

// Walks the fields of one message of `type` until `in`'s current limit. Returns false with
// `*fault` set at the first field at fault; false with `*fault` empty when the fault is not a
// field's; true when every field read.
bool Walk(const Descriptor& type, CodedInputStream& in, const std::string& prefix, int depth,
          std::string* fault) {
  std::map<int, int> seen;  // occurrences of each repeated field so far: its index
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return in.ConsumedEntireMessage() || in.BytesUntilLimit() == 0;
    const int number = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    const WireFormatLite::WireType wire = WireFormatLite::GetTagWireType(tag);
    const FieldDescriptor* field = type.FindFieldByNumber(number);
    const bool packed = field != nullptr && field->is_packable() &&
                        wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    // A field unknown to this version, or sent with a wire type that is not its type's, is an
    // unknown field to the parser: skipped, not refused.
    if (field == nullptr || (wire != WireTypeOf(*field) && !packed)) {
      if (!WireFormatLite::SkipField(&in, tag)) {
        *fault = absl::StrCat(
            prefix, field == nullptr ? absl::StrCat("field ", number) : std::string(field->name()),
            ": is cut short or malformed");
        return false;
      }
      continue;
    }
    std::string path = absl::StrCat(prefix, field->name());
    if (field->is_repeated()) absl::StrAppend(&path, "[", seen[number]++, "]");
    if (wire != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) {
        *fault = absl::StrCat(path, ": is cut short");
        return false;
      }
      continue;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length) || length > static_cast<uint32_t>(in.BytesUntilLimit())) {
      *fault = absl::StrCat(path, ": is cut short (its length runs past the body)");
      return false;
    }
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      std::string value;
      if (!in.ReadString(&value, static_cast<int>(length))) {
        *fault = absl::StrCat(path, ": is cut short");
        return false;
      }
      // proto3 refuses a string that is not UTF-8, by the parser's own check; proto2 takes it.
      const bool strict =
          field->file()->syntax() == google::protobuf::FileDescriptor::SYNTAX_PROTO3;
      if (strict && !google::protobuf::internal::IsStructurallyValidUTF8(value)) {
        *fault = absl::StrCat(path, ": is not valid UTF-8");
        return false;
      }
      continue;
    }
    if (field->type() == FieldDescriptor::TYPE_MESSAGE && depth < kMaxDepth) {
      const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
      if (!Walk(*field->message_type(), in, path + ".", depth + 1, fault)) return false;
      in.PopLimit(limit);
      continue;
    }
    if (!in.Skip(static_cast<int>(length))) {
      *fault = absl::StrCat(path, ": is cut short");
      return false;
    }
  }
}

}  // namespace

std::string DiagnoseWireFormat(const Descriptor& type, absl::string_view bytes) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  std::string fault;
  Walk(type, in, "", 0, &fault);
  return fault;
}

std::string UnparsableBodyMessage(const Descriptor& type, const grpc::ByteBuffer& body) {
  std::string bytes;
  std::vector<grpc::Slice> slices;
  if (body.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  const std::string fault = DiagnoseWireFormat(type, bytes);
  if (fault.empty()) {
    return absl::StrCat("request body is not a valid ", type.full_name(),
                        " (protobuf wire format)");
  }
  return absl::StrCat(fault, " (request body is not a valid ", type.full_name(), ")");
}

}  // namespace ratelimit
