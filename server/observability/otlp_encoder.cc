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

std::string EncodeExportRequest(const Resource& resource, absl::string_view scope_name,
                                const std::vector<std::string>& spans) {
  // Resource{attributes 1: KeyValue{key 1, value 2: AnyValue{string_value 1 | int_value 3}}}
  size_t resource_size = 0;
  for (const auto& [key, value] : resource) {
    resource_size += Field(Field(key.size()) + Field(AnyValueSize(value)));
  }
  // ScopeSpans{scope 1: InstrumentationScope{name 1}, spans 2}
  size_t scope_spans_size = Field(Field(scope_name.size()));
  for (const std::string& s : spans) scope_spans_size += Field(s.size());
  // ResourceSpans{resource 1, scope_spans 2}; ExportTraceServiceRequest{resource_spans 1}
  const size_t resource_spans_size = Field(resource_size) + Field(scope_spans_size);

  std::string out;
  out.reserve(Field(resource_spans_size));
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
  for (const std::string& s : spans) PutBytes(out, 2, s);
  return out;
}

}  // namespace ratelimit
