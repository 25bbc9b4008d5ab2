#include "client/cpp/lease_command.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cpp/cli_util.h"
#include "client/cpp/proto_time.h"

namespace ratelimit {
namespace {

absl::Status SetTtl(const std::string& text, google::protobuf::Duration* out) {
  absl::StatusOr<absl::Duration> d = ParseDurationFlag("--ttl", text);
  if (!d.ok()) return d.status();
  if (*d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--ttl: must be positive, got \"", text, "\""));
  }
  SetProtoDuration(*d, out);
  return absl::OkStatus();
}

absl::Status NeedsLeaseId(const LeaseFlags& flags, absl::string_view command) {
  if (flags.lease_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(command, ": --lease_id is required (the id acquire printed)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::AcquireRequest> AcquireOf(const LeaseFlags& flags) {
  v1::AcquireRequest r;
  v1::LimitRequest* l = r.add_limits();
  l->set_name(flags.name);
  l->set_key(flags.key);
  if (flags.config) *l->mutable_config() = *flags.config;
  l->set_count(flags.count);  // the server names limits[0].count when it is not whole slots
  if (!flags.ttl.empty()) {
    if (absl::Status s = SetTtl(flags.ttl, r.mutable_ttl()); !s.ok()) return s;
  }
  r.set_request_id(flags.request_id);
  r.set_holder(flags.holder);
  return r;
}

absl::StatusOr<v1::ReleaseRequest> ReleaseOf(const LeaseFlags& flags) {
  if (absl::Status s = NeedsLeaseId(flags, "release"); !s.ok()) return s;
  v1::ReleaseRequest r;
  r.set_name(flags.name);
  r.set_key(flags.key);
  r.set_lease_id(flags.lease_id);
  if (flags.config) *r.mutable_config() = *flags.config;
  return r;
}

absl::StatusOr<v1::ExtendRequest> ExtendOf(const LeaseFlags& flags) {
  if (absl::Status s = NeedsLeaseId(flags, "extend"); !s.ok()) return s;
  v1::ExtendRequest r;
  r.set_name(flags.name);
  r.set_key(flags.key);
  r.set_lease_id(flags.lease_id);
  if (flags.config) *r.mutable_config() = *flags.config;
  if (!flags.ttl.empty()) {
    if (absl::Status s = SetTtl(flags.ttl, r.mutable_ttl()); !s.ok()) return s;
  }
  return r;
}

v1::ListLeasesRequest ListLeasesOf(const LeaseFlags& flags) {
  v1::ListLeasesRequest r;
  r.set_name(flags.name);
  r.set_key(flags.key);
  if (flags.config || flags.inline_limits) r.set_source(v1::INLINE);
  if (flags.config) *r.mutable_config() = *flags.config;
  r.set_page_size(flags.page_size);
  r.set_page_token(flags.page_token);
  return r;
}

std::string FormatLease(const v1::Lease& lease) {
  std::string line =
      absl::StrCat("lease ", lease.id(), " ", lease.name(), "/", lease.key(), ": ", lease.count(),
                   lease.count() == 1 ? " slot" : " slots", " until ", Rfc3339(lease.expires_at()));
  if (!lease.holder().empty()) absl::StrAppend(&line, " (", lease.holder(), ")");
  return line + "\n";
}

std::string FormatAcquire(const v1::AcquireResponse& response, absl::Time now) {
  if (response.allowed()) {
    // A replay is the first answer to the request_id again: it took nothing now, and the lease
    // it names may have been released since (a released lease is kept until its expiry for
    // replays).
    return absl::StrCat(response.replayed()
                            ? "replayed (the first acquire of this request_id; nothing taken "
                              "now, the lease may be released since): "
                            : "acquired ",
                        FormatLease(response.lease()));
  }
  std::string text = absl::StrCat("refused: ", v1::DenyReason_Name(response.reason()));
  if (response.has_retry_at()) {
    const absl::Time at = TimeOf(response.retry_at());
    // In the server's unit (microseconds, as --json shows it), never the clock's nanoseconds.
    absl::StrAppend(&text, ", retry in ",
                    absl::FormatDuration(absl::Ceil(std::max(at - now, absl::ZeroDuration()),
                                                    absl::Microseconds(1))));
  }
  if (response.denied_by() >= 0 && response.denied_by() < response.results_size()) {
    const v1::LimitResult& r = response.results(response.denied_by());
    absl::StrAppendFormat(&text, " (%s/%s: %g free of %g)", r.name(), r.key(), r.value(),
                          r.capacity());
  }
  return text + "\n";
}

std::string FormatRelease(const v1::ReleaseResponse& response) {
  return absl::StrCat(response.state() == v1::RELEASED
                          ? "released"
                          : "not held (expired, released before, reset or never acquired)",
                      "; ", response.held(), response.held() == 1 ? " slot" : " slots",
                      " held now\n");
}

std::string FormatExtend(const v1::ExtendResponse& response) {
  if (response.state() != v1::HELD) {
    return "not held (expired, released or reset): the holder has lost its slots\n";
  }
  return absl::StrCat("extended ", FormatLease(response.lease()));
}

std::string FormatLeases(const v1::ListLeasesRequest& request,
                         const v1::ListLeasesResponse& response) {
  std::string text = absl::StrCat(request.name(), "/", request.key(), ": ", response.held(), " of ",
                                  response.capacity(), " slots held\n");
  for (const v1::Lease& l : response.leases()) absl::StrAppend(&text, "  ", FormatLease(l));
  if (!response.next_page_token().empty()) {
    absl::StrAppend(&text, "next page: --page_token=", response.next_page_token(), "\n");
  }
  return text;
}

}  // namespace ratelimit
