#include "server/observability/trace_context.h"

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

}  // namespace

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

}  // namespace ratelimit
