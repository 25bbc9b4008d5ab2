#include "storage/overrides/override_codec.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "storage/byte_codec.h"

namespace ratelimit {
namespace {

constexpr uint8_t kOverrideFormat = 1;
// Format 1 lacks the entry's target; format 2 adds it at the end.
constexpr uint8_t kAuditFormat = 2;
constexpr uint8_t kAuditFormatWithoutTarget = 1;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void I64(int64_t v) { Fixed(static_cast<uint64_t>(v)); }
  void F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    Fixed(bits);
  }
  void Str(absl::string_view s) {
    Fixed(s.size());
    out_.append(s.data(), s.size());
  }
  template <typename T, typename F>
  void Opt(const std::optional<T>& v, F put) {
    U8(v.has_value() ? 1 : 0);
    if (v) put(*v);
  }
  void Fixed(uint64_t v) {
    char bytes[8];
    StoreFixed64(bytes, v);
    out_.append(bytes, sizeof bytes);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  void Invalidate() { Fail(); }
  bool done() const { return ok_ && in_.empty(); }
  uint8_t U8() {
    if (in_.empty()) return Fail();
    const uint8_t v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return v;
  }
  uint64_t Fixed() {
    if (in_.size() < 8) return Fail();
    const uint64_t v = LoadFixed64(in_.data());
    in_.remove_prefix(8);
    return v;
  }
  int64_t I64() { return static_cast<int64_t>(Fixed()); }
  double F64() {
    const uint64_t bits = Fixed();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::string Str() {
    const uint64_t n = Fixed();
    if (!ok_ || n > in_.size()) return Fail(), std::string();
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  template <typename T, typename F>
  std::optional<T> Opt(F get) {
    const uint8_t present = U8();
    if (present > 1) Invalidate();
    if (!ok_ || present == 0) return std::nullopt;
    return get();
  }

 private:
  uint8_t Fail() {
    ok_ = false;
    in_ = {};
    return 0;
  }
  absl::string_view in_;
  bool ok_ = true;
};

bool ValidSource(uint8_t source) {
  return source == static_cast<uint8_t>(LimitSource::kDefined) ||
         source == static_cast<uint8_t>(LimitSource::kEnvoy) ||
         source == static_cast<uint8_t>(LimitSource::kInline);
}

void PutAction(Writer& w, const OverrideAction& a) {
  w.U8(static_cast<uint8_t>(a.effect));
  w.Opt(a.rate, [&](double v) { w.F64(v); });
  w.Opt(a.period_us, [&](int64_t v) { w.I64(v); });
  w.Opt(a.capacity, [&](double v) { w.F64(v); });
  w.Opt(a.max_reserved, [&](double v) { w.F64(v); });
}

OverrideAction GetAction(Reader& r) {
  OverrideAction a;
  const uint8_t effect = r.U8();
  if (effect > static_cast<uint8_t>(OverrideAction::Effect::kBlocked)) r.Invalidate();
  a.effect = static_cast<OverrideAction::Effect>(effect);
  a.rate = r.Opt<double>([&] { return r.F64(); });
  a.period_us = r.Opt<int64_t>([&] { return r.I64(); });
  a.capacity = r.Opt<double>([&] { return r.F64(); });
  a.max_reserved = r.Opt<double>([&] { return r.F64(); });
  return a;
}

void PutOverride(Writer& w, const Override& o) {
  w.U8(kOverrideFormat);
  w.U8(static_cast<uint8_t>(o.target.source));
  w.Str(o.target.name);
  w.Str(o.target.key);
  w.U8(o.target.pattern ? 1 : 0);
  PutAction(w, o.action);
  w.Opt(o.expires_at_us, [&](int64_t v) { w.I64(v); });
  w.Str(o.reason);
  w.Str(o.set_by);
  w.I64(o.set_at_us);
  w.Opt(o.replaced, [&](const OverrideAction& a) { PutAction(w, a); });
  w.Opt(o.deleted_at_us, [&](int64_t v) { w.I64(v); });
}

std::optional<Override> GetOverride(Reader& r) {
  if (r.U8() != kOverrideFormat) return std::nullopt;
  Override o;
  const uint8_t source = r.U8();
  if (!ValidSource(source)) return std::nullopt;
  o.target.source = static_cast<LimitSource>(source);
  o.target.name = r.Str();
  o.target.key = r.Str();
  const uint8_t pattern = r.U8();
  if (pattern > 1) return std::nullopt;
  o.target.pattern = pattern == 1;
  o.action = GetAction(r);
  o.expires_at_us = r.Opt<int64_t>([&] { return r.I64(); });
  o.reason = r.Str();
  o.set_by = r.Str();
  o.set_at_us = r.I64();
  o.replaced = r.Opt<OverrideAction>([&] { return GetAction(r); });
  o.deleted_at_us = r.Opt<int64_t>([&] { return r.I64(); });
  if (!r.ok()) return std::nullopt;
  return o;
}

}  // namespace

std::string OverrideNamePrefix(LimitSource source, absl::string_view name) {
  std::string out = kOverrideKeyPrefix;
  out.push_back(static_cast<char>(source));
  out.append(name.data(), name.size());
  out.push_back('\0');
  return out;
}

std::string EncodeOverrideKey(const OverrideTarget& t) {
  std::string out = OverrideNamePrefix(t.source, t.name);
  out.push_back(t.pattern ? 'p' : 'k');
  out += t.key;
  return out;
}

std::string EncodeAuditKey(uint64_t sequence) {
  std::string out = kAuditKeyPrefix;
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((sequence >> (8 * i)) & 0xff));
  return out;
}

std::string EncodeOverride(const Override& o) {
  Writer w;
  PutOverride(w, o);
  return std::move(w.out());
}

std::optional<Override> DecodeOverride(absl::string_view bytes) {
  Reader r(bytes);
  std::optional<Override> o = GetOverride(r);
  if (!o || !r.done()) return std::nullopt;
  return o;
}

std::string EncodeAuditEntry(const OverrideAuditEntry& e) {
  Writer w;
  w.U8(kAuditFormat);
  w.Fixed(e.sequence);
  w.I64(e.at_us);
  w.Str(e.action);
  w.Str(e.authorized_by);
  w.Str(e.actor);
  w.Str(e.peer);
  w.Str(e.reason);
  w.Opt(e.before, [&](const Override& o) { w.Str(EncodeOverride(o)); });
  w.Opt(e.after, [&](const Override& o) { w.Str(EncodeOverride(o)); });
  w.Opt(e.target, [&](const OverrideTarget& t) {
    w.U8(static_cast<uint8_t>(t.source));
    w.Str(t.name);
    w.Str(t.key);
    w.U8(t.pattern ? 1 : 0);
  });
  return std::move(w.out());
}

std::optional<OverrideAuditEntry> DecodeAuditEntry(absl::string_view bytes) {
  Reader r(bytes);
  const uint8_t format = r.U8();
  if (format != kAuditFormat && format != kAuditFormatWithoutTarget) return std::nullopt;
  OverrideAuditEntry e;
  e.sequence = r.Fixed();
  e.at_us = r.I64();
  e.action = r.Str();
  e.authorized_by = r.Str();
  e.actor = r.Str();
  e.peer = r.Str();
  e.reason = r.Str();
  bool bad = false;
  auto nested = [&]() -> std::optional<Override> {
    std::optional<Override> o = DecodeOverride(r.Str());
    if (!o) bad = true;
    return o;
  };
  e.before = r.Opt<Override>(nested);
  e.after = r.Opt<Override>(nested);
  if (format == kAuditFormat) {
    e.target = r.Opt<OverrideTarget>([&]() -> OverrideTarget {
      OverrideTarget t;
      const uint8_t source = r.U8();
      if (!ValidSource(source)) r.Invalidate();
      t.source = static_cast<LimitSource>(source);
      t.name = r.Str();
      t.key = r.Str();
      const uint8_t pattern = r.U8();
      if (pattern > 1) r.Invalidate();
      t.pattern = pattern == 1;
      return t;
    });
  }
  if (bad || !r.done()) return std::nullopt;
  return e;
}

std::vector<OverrideStore::ChangedTarget> LatestPerTarget(std::vector<OverrideAuditEntry> entries) {
  absl::flat_hash_map<std::string, size_t> latest;  // encoded target -> its last entry
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].target) latest[EncodeOverrideKey(*entries[i].target)] = i;
  }
  std::vector<OverrideStore::ChangedTarget> out;
  out.reserve(latest.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i].target || latest[EncodeOverrideKey(*entries[i].target)] != i) continue;
    out.push_back({entries[i].sequence, *std::move(entries[i].target), std::nullopt});
  }
  return out;
}

std::string EncodeU64(uint64_t v) {
  Writer w;
  w.Fixed(v);
  return std::move(w.out());
}

std::optional<uint64_t> DecodeU64(absl::string_view bytes) {
  Reader r(bytes);
  const uint64_t v = r.Fixed();
  if (!r.done()) return std::nullopt;
  return v;
}

}  // namespace ratelimit
