// ratelimit: command-line client of ratelimit.v1.RateLimitService.
//
//   ratelimit consume --name=api --key=user-1 [--count=2]
//   ratelimit check   --name=api --key=user-1
//   ratelimit reserve --name=llm --key=org-7 --count=5000 [--wait [--max_wait=D]] [--request_id=ID]
//   ratelimit settle  --receipt=BASE64[,BASE64...] --used=1234
//   ratelimit reset   --name=api --key=user-1 | --all_keys      (needs the admin token)
//   ratelimit reset   --source=envoy --name=DOMAIN --envoy_path=k1=v1,k2 --key='v1|v2'
//   ratelimit rlqs assignments --domain=edge --bucket=tenant=a[,route=b]  (needs the admin token)
//   ratelimit override set --name=api --key=k | --key_pattern='trial-*' [--rate=N] [--period=1s]
//                          [--capacity=N] [--max_reserved=N] | --unlimited | --blocked
//                          [--expires_in=2h] [--reason=TEXT] [--actor=WHO]
//   ratelimit override get|delete --name=api --key=k | --key_pattern=P
//   ratelimit override list [--name=api] [--page_size=N] [--page_token=T]
//   ratelimit override audit [--name=api] [--page_size=N] [--page_token=T]
//   (override commands need the admin token, as reset does)
//   ratelimit acquire --name=jobs --key=t1 [--count=2] [--ttl=30s] [--request_id=ID] [--holder=W]
//   ratelimit release --name=jobs --key=t1 --lease_id=ID
//   ratelimit extend  --name=jobs --key=t1 --lease_id=ID [--ttl=30s]
//   ratelimit leases  --name=jobs --key=t1 [--page_size=N] [--page_token=T]  (the admin token)
//   (an inline concurrency limit: --kind=concurrency --capacity=N [--lease_ttl=D]
//    [--max_lease_ttl=D] on each lease command, as --kind=token_bucket ... on consume)
//
// Exit status: 0 allowed (or reset done, assignments shown, or --help), 2 denied, 1 error, and
// 128 + the signal when a `reserve --wait` was interrupted (its reservation cancelled). With
// --json, standard output carries one JSON document whatever happens: the reply, or on an error
// {"error":{"code":"NOT_FOUND","message":"..."}}.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/cli_util.h"
#include "client/cpp/client.h"
#include "client/cpp/inline_config.h"
#include "client/cpp/lease_command.h"
#include "client/cpp/output.h"
#include "client/cpp/override_command.h"
#include "client/cpp/reserve_wait.h"
#include "cmdline/help.h"
#include "storage/admin_token.h"

ABSL_FLAG(std::string, target, "127.0.0.1:8081", "server address host:port");
ABSL_FLAG(bool, tls, false,
          "connect with TLS (implied by any --tls_* flag); the server certificate must verify");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle that verifies the server (default: gRPC's root certificates)");
ABSL_FLAG(std::string, tls_cert_file, "", "PEM client certificate chain, for mTLS");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_server_name, "",
          "name the server certificate must carry, when it differs from the --target host");
ABSL_FLAG(std::string, name, "", "limit name");
ABSL_FLAG(std::string, key, "", "limit key");
ABSL_FLAG(double, count, 1, "tokens to take");
ABSL_FLAG(bool, json, false, "print the reply as JSON");
ABSL_FLAG(std::string, timeout, "2s",
          "deadline of the call: a duration (500ms, 2s, 1m) or a number of seconds (5, 0.5)");
ABSL_FLAG(bool, all_keys, false, "reset: every key of --name");
ABSL_FLAG(std::string, source, "limits_file",
          "reset, override, leases: where the limit is defined: limits_file, inline (reset, "
          "leases) or envoy (then --name is the domain and --envoy_path the rule)");
ABSL_FLAG(std::vector<std::string>, envoy_path, {},
          "reset, override --source=envoy: the rule's descriptor path, one level per "
          "comma-separated item, "
          "key or key=value as in the configuration (e.g. message_type=marketing,to_number)");
ABSL_FLAG(bool, envoy_override, false,
          "reset --source=envoy: the limit Envoy sends in the descriptor (--envoy_path lists its "
          "keys)");
ABSL_FLAG(bool, wait, false,
          "reserve: print the reservation, then wait until its retry_at before exiting; an "
          "interrupted wait (Ctrl-C, SIGTERM, SIGHUP) cancels the reservation");
ABSL_FLAG(std::string, max_wait, "",
          "reserve --wait: the longest wait accepted, a duration (30s, 5m); a reservation usable "
          "only later is cancelled at once (exit status 1, DEADLINE_EXCEEDED). Default: any");
ABSL_FLAG(std::string, request_id, "",
          "consume, reserve, acquire: idempotency key (1..128 bytes); a retry with the same id and "
          "request gets the first answer (marked replayed) instead of taking again");
ABSL_FLAG(bool, omit_receipts, false,
          "consume, reserve: the answer carries no receipt (for callers that never settle)");
ABSL_FLAG(std::vector<std::string>, receipt, {},
          "settle: the receipt(s) printed by consume or reserve (base64), comma-separated");
ABSL_FLAG(double, used, -1, "settle: tokens actually used (0 cancels); required");
ABSL_FLAG(std::string, admin_token_file, "",
          "reset, leases, rlqs assignments, override: file with the admin token (else "
          "$RATELIMIT_ADMIN_TOKEN)");
ABSL_FLAG(std::string, domain, "", "rlqs assignments: the RLQS domain (required)");
ABSL_FLAG(std::string, bucket, "",
          "rlqs assignments: the bucket's BucketId as comma-separated key=value pairs (e.g. "
          "tenant=a,route=b; a ',', '=' or '\\' inside a key or value escaped by '\\', as the "
          "output prints them); none: every bucket of --domain, a page at a time");
ABSL_FLAG(std::string, kind, "",
          "inline config: token_bucket or fixed_window (consume, check, reserve), concurrency "
          "(acquire, release, extend, leases)");
ABSL_FLAG(double, rate, 0, "inline config, override set: tokens per period");
ABSL_FLAG(std::string, period, "", "inline config, override set: period, e.g. 1s, 1m, 1h");
ABSL_FLAG(double, capacity, -1,
          "inline config: capacity (default: rate); override set: the new capacity");
ABSL_FLAG(double, max_reserved, -1,
          "inline config: max_reserved (default: unbounded); override set: the new max_reserved");
ABSL_FLAG(std::string, key_pattern, "",
          "override: the keys matching a pattern ('*' matches any run of bytes) instead of --key");
ABSL_FLAG(std::string, ttl, "",
          "acquire, extend: the lease's TTL, e.g. 30s (default: the limit's lease_ttl)");
ABSL_FLAG(std::string, lease_ttl, "",
          "inline config --kind=concurrency: a lease's TTL when acquire gives none (default 30s)");
ABSL_FLAG(std::string, max_lease_ttl, "",
          "inline config --kind=concurrency: the longest TTL an acquire or extend may ask for "
          "(default max(lease_ttl, 1h))");
ABSL_FLAG(std::string, lease_id, "", "release, extend: the lease (the id acquire printed)");
ABSL_FLAG(std::string, holder, "", "acquire: who holds the lease, shown by leases");
ABSL_FLAG(bool, unlimited, false, "override set: allow every request, take nothing");
ABSL_FLAG(bool, blocked, false, "override set: deny every request, take nothing");
ABSL_FLAG(std::string, expires_in, "",
          "override set: the override ends by itself after this duration (e.g. 30m, 2h)");
ABSL_FLAG(std::string, reason, "", "override set, delete: why, recorded in the audit history");
ABSL_FLAG(std::string, actor, "",
          "override set, delete: who you are, recorded in the audit history");
ABSL_FLAG(int32_t, page_size, 0,
          "rlqs assignments without --bucket, override list, audit, leases: the most entries "
          "shown (0: the server's 100; at most 1000)");
ABSL_FLAG(std::string, page_token, "",
          "rlqs assignments without --bucket, override list, audit, leases: the page to show, as "
          "the previous page printed it");

namespace {

// Reports `error` (exit status 1): as JSON on standard output with --json, else as text on
// standard error.
int Error(const absl::Status& error) {
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ratelimit::FormatJsonError(error) << "\n";
  } else {
    std::cerr << "ratelimit: " << error.ToString() << "\n";
  }
  return 1;
}
// A mistake on the command line.
int Error(const std::string& message) { return Error(absl::InvalidArgumentError(message)); }

// The admin token by the server's rule (storage/admin_token.h): first line of
// --admin_token_file, else $RATELIMIT_ADMIN_TOKEN; a warning on stderr when the file is readable
// by group or others.
absl::StatusOr<std::string> AdminToken() {
  absl::StatusOr<ratelimit::AdminTokenSource> source =
      ratelimit::ReadAdminToken(absl::GetFlag(FLAGS_admin_token_file), "RATELIMIT_ADMIN_TOKEN");
  if (!source.ok()) return source.status();
  if (!source->warning.empty()) std::cerr << "ratelimit: warning: " << source->warning << "\n";
  return std::move(source->token);
}

// Prints `reply` as JSON with --json, else as `text`; exit status 0.
int Print(const google::protobuf::Message& reply, const std::string& text) {
  if (!absl::GetFlag(FLAGS_json)) {
    std::cout << text;
    return 0;
  }
  absl::StatusOr<std::string> out = ratelimit::FormatJson(reply);
  if (!out.ok()) return Error(out.status());
  std::cout << *out << "\n";
  return 0;
}

// A number flag's value, unless it holds its default (`unset`).
std::optional<double> IfGiven(const absl::Flag<double>& flag, double unset) {
  const double v = absl::GetFlag(flag);
  if (v == unset) return std::nullopt;
  return v;
}

// The inline config of --kind and its flags; nullopt without --kind.
absl::StatusOr<std::optional<ratelimit::v1::LimitConfig>> InlineConfig() {
  ratelimit::InlineConfigFlags f;
  f.kind = absl::GetFlag(FLAGS_kind);
  f.rate = absl::GetFlag(FLAGS_rate);
  f.period = absl::GetFlag(FLAGS_period);
  f.capacity = IfGiven(FLAGS_capacity, -1);
  f.max_reserved = IfGiven(FLAGS_max_reserved, -1);
  f.lease_ttl = absl::GetFlag(FLAGS_lease_ttl);
  f.max_lease_ttl = absl::GetFlag(FLAGS_max_lease_ttl);
  return ratelimit::InlineConfigOf(f);
}

// `ratelimit acquire|release|extend|leases`: exit status 0 when acquired, released, extended or
// listed; 2 when refused or not held.
template <typename CallError>
int LeaseCommand(const std::string& command, ratelimit::RateLimitClient& client,
                 const CallError& call_error) {
  ratelimit::LeaseFlags flags;
  flags.name = absl::GetFlag(FLAGS_name);
  flags.key = absl::GetFlag(FLAGS_key);
  flags.count = absl::GetFlag(FLAGS_count);
  flags.ttl = absl::GetFlag(FLAGS_ttl);
  flags.lease_id = absl::GetFlag(FLAGS_lease_id);
  flags.request_id = absl::GetFlag(FLAGS_request_id);
  flags.holder = absl::GetFlag(FLAGS_holder);
  flags.page_size = absl::GetFlag(FLAGS_page_size);
  flags.page_token = absl::GetFlag(FLAGS_page_token);
  if (const std::string source = absl::GetFlag(FLAGS_source); source == "inline") {
    flags.inline_limits = true;
  } else if (source != "limits_file") {
    return Error("--source: a concurrency limit is in limits_file or inline");
  }
  absl::StatusOr<std::optional<ratelimit::v1::LimitConfig>> config = InlineConfig();
  if (!config.ok()) return Error(config.status());
  flags.config = *std::move(config);
  if (command == "acquire") {
    absl::StatusOr<ratelimit::v1::AcquireRequest> request = ratelimit::AcquireOf(flags);
    if (!request.ok()) return Error(request.status());
    auto response = client.Acquire(*request);
    if (!response.ok()) return call_error(response.status());
    const int printed = Print(*response, ratelimit::FormatAcquire(*response, absl::Now()));
    return printed != 0 ? printed : response->allowed() ? 0 : 2;
  }
  if (command == "release") {
    absl::StatusOr<ratelimit::v1::ReleaseRequest> request = ratelimit::ReleaseOf(flags);
    if (!request.ok()) return Error(request.status());
    auto response = client.Release(*request);
    if (!response.ok()) return call_error(response.status());
    const int printed = Print(*response, ratelimit::FormatRelease(*response));
    return printed != 0 ? printed : response->state() == ratelimit::v1::RELEASED ? 0 : 2;
  }
  if (command == "extend") {
    absl::StatusOr<ratelimit::v1::ExtendRequest> request = ratelimit::ExtendOf(flags);
    if (!request.ok()) return Error(request.status());
    auto response = client.Extend(*request);
    if (!response.ok()) return call_error(response.status());
    const int printed = Print(*response, ratelimit::FormatExtend(*response));
    return printed != 0 ? printed : response->state() == ratelimit::v1::HELD ? 0 : 2;
  }
  const ratelimit::v1::ListLeasesRequest request = ratelimit::ListLeasesOf(flags);
  auto response = client.ListLeases(request);
  if (!response.ok()) return call_error(response.status());
  return Print(*response, ratelimit::FormatLeases(request, *response));
}

// `ratelimit override <sub>`.
template <typename CallError>
int OverrideCommand(const std::string& sub, ratelimit::RateLimitClient& client,
                    const CallError& call_error) {
  ratelimit::OverrideFlags f;
  if (const std::string source = absl::GetFlag(FLAGS_source); source == "envoy") {
    f.source = ratelimit::v1::ENVOY;
  } else if (source != "limits_file") {
    return Error("--source: an override's limit is in limits_file or envoy");
  }
  f.envoy_path = absl::GetFlag(FLAGS_envoy_path);
  f.name = absl::GetFlag(FLAGS_name);
  f.key = absl::GetFlag(FLAGS_key);
  f.key_pattern = absl::GetFlag(FLAGS_key_pattern);
  f.rate = IfGiven(FLAGS_rate, 0);
  f.period = absl::GetFlag(FLAGS_period);
  f.capacity = IfGiven(FLAGS_capacity, -1);
  f.max_reserved = IfGiven(FLAGS_max_reserved, -1);
  f.unlimited = absl::GetFlag(FLAGS_unlimited);
  f.blocked = absl::GetFlag(FLAGS_blocked);
  f.expires_in = absl::GetFlag(FLAGS_expires_in);
  f.reason = absl::GetFlag(FLAGS_reason);
  f.actor = absl::GetFlag(FLAGS_actor);
  f.page_size = absl::GetFlag(FLAGS_page_size);
  f.page_token = absl::GetFlag(FLAGS_page_token);
  if (sub == "set") {
    absl::StatusOr<ratelimit::v1::SetOverrideRequest> request =
        ratelimit::SetOverrideOf(f, absl::Now());
    if (!request.ok()) return Error(request.status());
    auto set = client.SetOverride(*request);
    if (!set.ok()) return call_error(set.status());
    return Print(*set, "set " + ratelimit::FormatOverride(set->override()));
  }
  if (sub == "get") {
    ratelimit::v1::GetOverrideRequest request;
    *request.mutable_target() = ratelimit::OverrideTargetOf(f);
    auto got = client.GetOverride(request);
    if (!got.ok()) return call_error(got.status());
    return Print(*got, ratelimit::FormatOverride(got->override()));
  }
  if (sub == "delete") {
    ratelimit::v1::DeleteOverrideRequest request;
    *request.mutable_target() = ratelimit::OverrideTargetOf(f);
    request.set_reason(f.reason);
    request.set_actor(f.actor);
    auto deleted = client.DeleteOverride(request);
    if (!deleted.ok()) return call_error(deleted.status());
    return Print(*deleted, "deleted " + ratelimit::FormatOverride(deleted->deleted()));
  }
  if (sub == "list") {
    ratelimit::v1::ListOverridesRequest request;
    request.set_source(f.source);
    request.set_name(f.name);
    request.set_page_size(f.page_size);
    request.set_page_token(f.page_token);
    auto listed = client.ListOverrides(request);
    if (!listed.ok()) return call_error(listed.status());
    std::string text;
    for (const auto& o : listed->overrides()) text += ratelimit::FormatOverride(o);
    if (!listed->next_page_token().empty()) {
      text += "next page: --page_token=" + listed->next_page_token() + "\n";
    }
    return Print(*listed, text);
  }
  if (sub == "audit") {
    ratelimit::v1::ListOverrideAuditRequest request;
    request.set_name(f.name);
    request.set_page_size(f.page_size);
    request.set_page_token(f.page_token);
    auto audit = client.ListOverrideAudit(request);
    if (!audit.ok()) return call_error(audit.status());
    std::string text;
    for (const auto& e : audit->entries()) text += ratelimit::FormatAuditEntry(e);
    if (!audit->next_page_token().empty()) {
      text += "next page: --page_token=" + audit->next_page_token() + "\n";
    }
    return Print(*audit, text);
  }
  return Error(
      std::string("usage: ratelimit override set|get|list|delete|audit [flags]; see --help"));
}

int Usage() {
  return Error(
      std::string("usage: ratelimit consume|check|reserve|reset|acquire|release|extend|leases "
                  "--name=NAME --key=KEY [flags], "
                  "ratelimit settle --receipt=BASE64 --used=N, ratelimit rlqs assignments "
                  "--domain=D [--bucket=k=v,...] or ratelimit health; see --help"));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit consume|check|reserve|reset --name=NAME --key=KEY [--count=N] [--json]\n"
      "ratelimit settle --receipt=BASE64 --used=N [--json]\n"
      "ratelimit rlqs assignments --domain=D [--bucket=k=v[,k=v]] [--json]: the live RLQS "
      "assignments (admin)\n"
      "ratelimit override set|get|list|delete|audit --name=NAME --key=KEY|--key_pattern=P "
      "[flags]: runtime overrides (admin)\n"
      "ratelimit acquire|release|extend|leases --name=NAME --key=KEY [--lease_id=ID] [--ttl=D]: "
      "concurrency limits (leases: admin)\n"
      "ratelimit health: exit status 0 when the server is SERVING (grpc.health.v1), 1 otherwise");
  // --help lists the flags of this file (absl's default looks for a file named after the binary).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "client/cpp/cli_main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  ratelimit::HandleHelp(argc, argv, "client/cpp/cli_main.cc");
  const std::vector<std::string> given = ratelimit::FlagsGiven(argc, argv);
  // A mistake in the flags is one error line like any other (a JSON error with --json), not
  // absl's text.
  if (const absl::Status s = ratelimit::CheckFlags(argc, argv); !s.ok()) {
    if (std::find(given.begin(), given.end(), "json") != given.end()) {
      std::cout << ratelimit::FormatJsonError(s) << "\n";
    } else {
      std::cerr << "ratelimit: " << s.ToString() << "\n";
    }
    return 1;
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  // `rlqs assignments` and `override <verb>` are the commands of two words.
  const bool rlqs = positional.size() == 3 && std::string(positional[1]) == "rlqs" &&
                    std::string(positional[2]) == "assignments";
  const bool is_override = positional.size() == 3 && std::string(positional[1]) == "override";
  if (positional.size() != 2 && !rlqs && !is_override) return Usage();
  const std::string command = rlqs ? "rlqs assignments" : positional[1];
  const bool json = absl::GetFlag(FLAGS_json);
  // A flag the command does not take is refused, not dropped unseen.
  if (const std::string unused = ratelimit::FlagNotTaken(
          is_override ? absl::StrCat("override ", positional[2]) : command, given);
      !unused.empty()) {
    return Error(absl::StrCat("--", unused, ": ", is_override ? "override " : "",
                              is_override ? std::string(positional[2]) : command,
                              " does not take it"));
  }

  const bool reserve_wait = command == "reserve" && absl::GetFlag(FLAGS_wait);
  std::optional<absl::Duration> max_wait;
  if (!absl::GetFlag(FLAGS_max_wait).empty()) {
    if (!reserve_wait) return Error("--max_wait: only with reserve --wait");
    absl::StatusOr<absl::Duration> d =
        ratelimit::ParseDurationFlag("--max_wait", absl::GetFlag(FLAGS_max_wait));
    if (!d.ok()) return Error(d.status());
    if (*d < absl::ZeroDuration()) return Error("--max_wait: must be 0 or more");
    max_wait = *d;
  }
  // Before the first thread starts (connecting starts gRPC's): an interrupt then waits for the
  // reservation's wait, which cancels it, instead of ending the process while it is held.
  if (reserve_wait) ratelimit::HoldInterrupts();

  ratelimit::ClientOptions options;
  absl::StatusOr<absl::Duration> timeout = ratelimit::ParseTimeout(absl::GetFlag(FLAGS_timeout));
  if (!timeout.ok()) return Error(timeout.status());
  options.timeout = *timeout;
  const bool admin_call = command == "reset" || command == "leases" || rlqs || is_override;
  if (admin_call) {
    absl::StatusOr<std::string> token = AdminToken();
    if (!token.ok()) return Error(token.status());
    options.admin_token = *token;
  }
  ratelimit::ClientTlsOptions tls{
      absl::GetFlag(FLAGS_tls_ca_file), absl::GetFlag(FLAGS_tls_cert_file),
      absl::GetFlag(FLAGS_tls_key_file), absl::GetFlag(FLAGS_tls_server_name)};
  std::unique_ptr<ratelimit::RateLimitClient> client;
  const bool use_tls = absl::GetFlag(FLAGS_tls) || !tls.ca_file.empty() || !tls.cert_file.empty() ||
                       !tls.key_file.empty() || !tls.server_name.empty();
  // A call's error, with a hint when it looks like a plaintext call to a TLS port or the reverse,
  // or like an admin call sent without the credential.
  auto call_error = [use_tls, token_sent = admin_call &&
                                           !options.admin_token.empty()](const absl::Status& s) {
    return Error(ratelimit::WithAdminHint(ratelimit::WithTransportHint(s, use_tls), token_sent));
  };
  if (use_tls) {
    absl::StatusOr<std::unique_ptr<ratelimit::RateLimitClient>> connected =
        ratelimit::RateLimitClient::ConnectTls(absl::GetFlag(FLAGS_target), tls, options);
    if (!connected.ok()) return Error(connected.status());
    client = *std::move(connected);
  } else {
    client = ratelimit::RateLimitClient::Connect(absl::GetFlag(FLAGS_target), options);
  }
  if (is_override) return OverrideCommand(positional[2], *client, call_error);
  if (command == "health") {
    const absl::Status s = client->Health();
    if (!s.ok()) return call_error(s);
    std::cout << (json ? "{\"status\":\"SERVING\"}" : "SERVING") << "\n";
    return 0;
  }
  if (rlqs) {
    ratelimit::v1::GetRlqsAssignmentsRequest request;
    request.set_domain(absl::GetFlag(FLAGS_domain));
    if (request.domain().empty()) return Error("rlqs assignments: --domain is required");
    absl::StatusOr<std::map<std::string, std::string>> pairs =
        ratelimit::ParseBucketPairs(absl::GetFlag(FLAGS_bucket));
    if (!pairs.ok()) return Error(pairs.status());
    request.mutable_bucket()->insert(pairs->begin(), pairs->end());
    if (absl::GetFlag(FLAGS_page_size) < 0) return Error("--page_size: must be 0 or more");
    request.set_page_size(static_cast<uint32_t>(absl::GetFlag(FLAGS_page_size)));
    request.set_page_token(absl::GetFlag(FLAGS_page_token));
    absl::StatusOr<ratelimit::v1::GetRlqsAssignmentsResponse> response =
        client->GetRlqsAssignments(request);
    if (!response.ok()) return call_error(response.status());
    if (json) {
      absl::StatusOr<std::string> out = ratelimit::FormatJson(*response);
      if (!out.ok()) return Error(out.status());
      std::cout << *out << "\n";
    } else {
      std::cout << ratelimit::FormatRlqsAssignments(*response);
    }
    return 0;
  }

  const std::string name = absl::GetFlag(FLAGS_name);
  const std::string key = absl::GetFlag(FLAGS_key);

  if (command == "reset") {
    ratelimit::v1::ResetRequest reset;
    reset.set_name(name);
    reset.set_key(key);
    reset.set_all_keys(absl::GetFlag(FLAGS_all_keys));
    if (const std::string source = absl::GetFlag(FLAGS_source); source == "limits_file") {
      reset.set_source(ratelimit::v1::LIMITS_FILE);
    } else if (source == "inline") {
      reset.set_source(ratelimit::v1::INLINE);
    } else if (source == "envoy") {
      reset.set_source(ratelimit::v1::ENVOY);
    } else {
      return Error("--source must be limits_file, inline or envoy");
    }
    for (const std::string& level : absl::GetFlag(FLAGS_envoy_path)) {
      ratelimit::v1::EnvoyPathEntry* e = reset.add_envoy_path();
      const size_t eq = level.find('=');
      e->set_key(level.substr(0, eq));
      if (eq != std::string::npos) e->set_value(level.substr(eq + 1));
    }
    reset.set_envoy_override(absl::GetFlag(FLAGS_envoy_override));
    const absl::StatusOr<ratelimit::v1::ResetResponse> reply = client->ResetDetailed(reset);
    if (!reply.ok()) return call_error(reply.status());
    const bool all_keys = absl::GetFlag(FLAGS_all_keys);
    return Print(*reply, ratelimit::FormatResetResponse(
                             name + (all_keys ? " (all keys)" : "/" + key), all_keys, *reply));
  }

  if (command == "acquire" || command == "release" || command == "extend" || command == "leases") {
    return LeaseCommand(command, *client, call_error);
  }

  if (command == "settle") {
    ratelimit::v1::SettleRequest settle;
    const double used = absl::GetFlag(FLAGS_used);
    if (used < 0) return Error("settle: --used=N is required (>= 0; 0 cancels)");
    if (absl::GetFlag(FLAGS_receipt).empty()) return Error("settle: --receipt is required");
    for (const std::string& encoded : absl::GetFlag(FLAGS_receipt)) {
      std::string receipt;
      if (!absl::Base64Unescape(encoded, &receipt)) {
        return Error("settle: --receipt is not base64 (copy it as consume or reserve printed it)");
      }
      ratelimit::v1::Settlement* s = settle.add_settlements();
      s->set_receipt(receipt);
      s->set_used(used);
    }
    absl::StatusOr<ratelimit::v1::SettleResponse> settled = client->Settle(settle);
    if (!settled.ok()) return call_error(settled.status());
    if (json) {
      absl::StatusOr<std::string> out = ratelimit::FormatJson(*settled);
      if (!out.ok()) return Error(out.status());
      std::cout << *out << "\n";
    } else {
      std::cout << ratelimit::FormatSettleResponse(*settled);
    }
    return 0;
  }

  ratelimit::v1::RateLimitRequest request =
      ratelimit::MakeRequest(name, key, absl::GetFlag(FLAGS_count));
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  request.set_omit_receipts(absl::GetFlag(FLAGS_omit_receipts));
  absl::StatusOr<std::optional<ratelimit::v1::LimitConfig>> config = InlineConfig();
  if (!config.ok()) return Error(config.status());
  if (*config) *request.mutable_limits(0)->mutable_config() = **std::move(config);

  if (reserve_wait) {
    ratelimit::ReserveWaitIo io;
    io.now = [] { return absl::Now(); };
    io.wait_until = ratelimit::WaitUnlessInterrupted;
    io.print = [json](const ratelimit::v1::RateLimitResponse& r) {
      if (json) {
        absl::StatusOr<std::string> out = ratelimit::FormatJson(r);
        std::cout << (out.ok() ? *out : ratelimit::FormatJsonError(out.status())) << "\n";
      } else {
        std::cout << ratelimit::FormatResponse(r, absl::Now());
      }
      std::cout.flush();
    };
    io.fail = call_error;
    io.note = &std::cerr;
    return ratelimit::ReserveThenWait(*client, request, max_wait, io);
  }

  absl::StatusOr<ratelimit::v1::RateLimitResponse> response;
  if (command == "consume") {
    response = client->Consume(request);
  } else if (command == "check") {
    response = client->Check(request);
  } else if (command == "reserve") {
    response = client->Reserve(request);
  } else {
    return Usage();
  }
  if (!response.ok()) return call_error(response.status());
  if (json) {
    absl::StatusOr<std::string> out = ratelimit::FormatJson(*response);
    if (!out.ok()) return Error(out.status());
    std::cout << *out << "\n";
  } else {
    std::cout << ratelimit::FormatResponse(*response, absl::Now());
  }
  return response->allowed() ? 0 : 2;
}
