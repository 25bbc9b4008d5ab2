#include "server/observability/otlp_encoder.h"

#include "server/observability/protowire.h"

namespace ratelimit {
namespace {

using namespace protowire;  // NOLINT(build/namespaces): wire-format helpers

// Size of a length-delimited field with a one-byte tag around `n` bytes.
size_t Field(size_t n) { return 1 + VarintSize(n) + n; }

// Size of AnyValue{string_value 1 | int_value 3} (without its own tag and length).
size_t AnyValueSize(const std::variant<std::string, int64_t>& v) {
  if (const std::string* s = std::get_if<std::string>(&v)) return Field(s->size());
  return 1 + VarintSize(static_cast<uint64_t>(std::get<int64_t>(v)));
}

void PutAnyValue(std::string& out, const std::variant<std::string, int64_t>& v) {
  if (const std::string* s = std::get_if<std::string>(&v)) {
    PutBytes(out, 1, *s);
  } else {
    PutUint(out, 3, static_cast<uint64_t>(std::get<int64_t>(v)));
  }
}

}  // namespace

void AppendFramedSpan(std::string& framed, absl::string_view span) { PutBytes(framed, 2, span); }

std::string EncodeExportRequestHeader(const Resource& resource, absl::string_view scope_name,
                                      size_t framed_spans_size) {
  // Resource{attributes 1: KeyValue{key 1, value 2: AnyValue{string_value 1 | int_value 3}}}
  size_t resource_size = 0;
  for (const auto& [key, value] : resource) {
    resource_size += Field(Field(key.size()) + Field(AnyValueSize(value)));
  }
  // ScopeSpans{scope 1: InstrumentationScope{name 1}, spans 2 (already framed)}
  const size_t scope_spans_size = Field(Field(scope_name.size())) + framed_spans_size;
  // ResourceSpans{resource 1, scope_spans 2}; ExportTraceServiceRequest{resource_spans 1}
  const size_t resource_spans_size = Field(resource_size) + Field(scope_spans_size);

  std::string out;
  out.reserve(Field(resource_spans_size) - framed_spans_size);
  PutTag(out, 1, kLen);
  PutVarint(out, resource_spans_size);
  PutTag(out, 1, kLen);
  PutVarint(out, resource_size);
  for (const auto& [key, value] : resource) {
    PutTag(out, 1, kLen);
    PutVarint(out, Field(key.size()) + Field(AnyValueSize(value)));
    PutBytes(out, 1, key);
    PutTag(out, 2, kLen);
    PutVarint(out, AnyValueSize(value));
    PutAnyValue(out, value);
  }
  PutTag(out, 2, kLen);
  PutVarint(out, scope_spans_size);
  PutTag(out, 1, kLen);
  PutVarint(out, Field(scope_name.size()));
  PutBytes(out, 1, scope_name);
  return out;
}

std::string EncodeExportRequest(const Resource& resource, absl::string_view scope_name,
                                const std::vector<std::string>& spans) {
  std::string framed;
  for (const std::string& s : spans) AppendFramedSpan(framed, s);
  std::string out = EncodeExportRequestHeader(resource, scope_name, framed.size());
  out.append(framed);
  return out;
}

}  // namespace ratelimit
