#include "server/observability/trace_context.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_split.h"

namespace ratelimit {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is invalid in traceparent
}

bool ParseHex(absl::string_view text, uint8_t* out, size_t n) {
  if (text.size() != 2 * n) return false;
  for (size_t i = 0; i < n; ++i) {
    const int hi = HexDigit(text[2 * i]), lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& a) {
  for (uint8_t b : a) {
    if (b != 0) return false;
  }
  return true;
}

bool IsLcAlpha(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsKeyChar(char c) {
  return IsLcAlpha(c) || IsDigit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

// simple-key = lcalpha 0*255(keychar); multi-tenant-key = tenant-id "@" system-id with
// tenant-id = (lcalpha / DIGIT) 0*240(keychar) and system-id = lcalpha 0*13(keychar).
bool IsValidKey(absl::string_view key) {
  const size_t at = key.find('@');
  auto chars_ok = [](absl::string_view s) {
    for (char c : s.substr(1)) {
      if (!IsKeyChar(c)) return false;
    }
    return true;
  };
  if (at == absl::string_view::npos) {
    return !key.empty() && key.size() <= 256 && IsLcAlpha(key[0]) && chars_ok(key);
  }
  const absl::string_view tenant = key.substr(0, at), system = key.substr(at + 1);
  return !tenant.empty() && tenant.size() <= 241 && (IsLcAlpha(tenant[0]) || IsDigit(tenant[0])) &&
         chars_ok(tenant) && !system.empty() && system.size() <= 14 && IsLcAlpha(system[0]) &&
         chars_ok(system);
}

// value = 0*255(chr) nblk-chr; chr = %x20 / nblk-chr; nblk-chr = %x21-7E except "," and "=".
bool IsValidValue(absl::string_view value) {
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  for (char c : value) {
    if (c < 0x20 || c > 0x7e || c == ',' || c == '=') return false;
  }
  return true;
}

absl::string_view TrimOws(absl::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

bool IsValidTracestate(absl::string_view header) {
  constexpr size_t kMaxLength = 512;
  constexpr int kMaxMembers = 32;
  if (header.size() > kMaxLength) return false;
  for (char c : header) {
    // Printable ASCII only: W3C also allows tabs around members, but the value is passed on
    // verbatim, so a tab-separated list is dropped rather than exported.
    if (c < 0x20 || c > 0x7e) return false;
  }
  std::vector<absl::string_view> keys;
  for (absl::string_view member : absl::StrSplit(header, ',')) {
    member = TrimOws(member);
    if (member.empty()) continue;  // empty list members are allowed
    const size_t eq = member.find('=');
    if (eq == absl::string_view::npos) return false;
    const absl::string_view key = member.substr(0, eq);
    if (!IsValidKey(key) || !IsValidValue(member.substr(eq + 1))) return false;
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return false;
    keys.push_back(key);
    if (static_cast<int>(keys.size()) > kMaxMembers) return false;
  }
  return true;
}

std::string ToHex(const uint8_t* bytes, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

std::optional<TraceContext> ParseTraceparent(absl::string_view h) {
  // version(2) - trace-id(32) - parent-id(16) - flags(2)
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  uint8_t version;
  if (!ParseHex(h.substr(0, 2), &version, 1) || version == 0xff) return std::nullopt;
  if (version == 0 && h.size() != 55) return std::nullopt;
  if (version != 0 && h.size() > 55 && h[55] != '-') return std::nullopt;
  TraceContext ctx;
  if (!ParseHex(h.substr(3, 32), ctx.trace_id.data(), 16) ||
      !ParseHex(h.substr(36, 16), ctx.span_id.data(), 8) ||
      !ParseHex(h.substr(53, 2), &ctx.flags, 1)) {
    return std::nullopt;
  }
  if (AllZero(ctx.trace_id) || AllZero(ctx.span_id)) return std::nullopt;
  return ctx;
}

std::string FormatTraceparent(const TraceId& trace_id, const SpanId& span_id, uint8_t flags) {
  return "00-" + ToHex(trace_id.data(), 16) + "-" + ToHex(span_id.data(), 8) + "-" +
         ToHex(&flags, 1);
}

std::optional<TraceContext> ParseTraceContext(std::optional<absl::string_view> traceparent,
                                              std::optional<absl::string_view> tracestate) {
  if (!traceparent) return std::nullopt;
  std::optional<TraceContext> context = ParseTraceparent(*traceparent);
  if (context && tracestate && IsValidTracestate(*tracestate)) {
    context->trace_state = std::string(*tracestate);
  }
  return context;
}

}  // namespace ratelimit
