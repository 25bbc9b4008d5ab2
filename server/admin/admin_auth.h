#ifndef RATELIMIT_SERVER_ADMIN_ADMIN_AUTH_H_
#define RATELIMIT_SERVER_ADMIN_ADMIN_AUTH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"
#include "server/observability/log.h"
#include "server/observability/repeated_log.h"
#include "server/observability/telemetry.h"
#include "storage/admin_token.h"

namespace ratelimit {

// The refusal of administrative call `method` ("Reset", "ListLeases", "SetOverride"...) by a
// server with neither an admin token nor admin identities (PERMISSION_DENIED, whatever the caller
// sent): "<method> is disabled: the server was started without an admin token ...". Reset's is the
// message clients document ("Reset is disabled: ..."); the other calls are named, so that an
// operator listing leases is not told that Reset is disabled.
std::string AdministrationDisabled(absl::string_view method);

// Authorizes administrative calls (Reset) by a shared bearer token, sent by the caller as the
// gRPC metadata `authorization: Bearer <token>`, or by the identity of a verified client
// certificate (a URI SAN such as a SPIFFE ID, or a DNS SAN) listed among the admin identities.
// When both are configured, either one suffices: a call is refused only when its certificate
// identity is not listed and it presents no matching token. The token comparison takes the same
// time whatever the presented token is, so timing does not reveal how much of it matched.
//
// Ownership: keeps its own copy of the token.
// Thread safety: immutable after construction; thread-safe.
class AdminAuthenticator {
 public:
  // An empty `token` disables authorization by token; no `identities` disables it by
  // certificate; neither: every administrative call is PERMISSION_DENIED.
  explicit AdminAuthenticator(std::string token, std::vector<std::string> identities = {})
      : token_(std::move(token)), identities_(std::move(identities)) {}

  // `authorization` is the metadata value, or nullopt when the caller sent none; `method` the
  // administrative call, named by the refusals.
  // PERMISSION_DENIED AdministrationDisabled(method): administration disabled (checked first).
  // UNAUTHENTICATED: no credential, or not of the form "Bearer <token>".
  // PERMISSION_DENIED: wrong token, or administration by token disabled.
  absl::Status Authorize(std::optional<absl::string_view> authorization,
                         absl::string_view method) const;

  // Authorizes a call by its certificate identities (see PeerIdentities in server/tls.h) or its
  // token. Returns how the call was authorized, for the audit log: "identity <SAN>" or "token".
  // PERMISSION_DENIED when the caller proved identities, none of them is an admin identity, and
  // it sent no token; otherwise errors as Authorize.
  absl::StatusOr<std::string> AuthorizeCall(std::optional<absl::string_view> authorization,
                                            absl::Span<const std::string> peer_identities,
                                            absl::string_view method) const;

  // Authorizes an admin RPC by what its `context` carries: the `authorization` metadata and the
  // identities of the client certificate the server verified (AuthorizeCall decides, for the
  // method `rpc` observes). Returns how
  // the call was authorized, or the refusal, which is first logged to `refused_log` (the event
  // of the caller's API; written once, then summarised) with the fields peer, peer_identities,
  // `subject` (what the call was about, e.g. {"limit", name}), reason and trace_id (of `rpc`).
  // The caller answers a refusal with ToGrpcStatus of it.
  absl::StatusOr<std::string> AuthorizeRpc(const grpc::ServerContextBase& context,
                                           const Telemetry::Rpc& rpc, LogField subject,
                                           RepeatedLog& refused_log) const;

  bool enabled() const { return !token_.empty() || !identities_.empty(); }

 private:
  const std::string token_;
  const std::vector<std::string> identities_;
};

// True when `a` equals `b`; the time taken depends only on the length of `b` (the secret).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The admin token by the rule of ReadAdminToken (storage/admin_token.h: first line of `file`,
// trimmed, else the environment variable `env`, else empty = administration disabled), with its
// warning about a group- or other-readable file logged. Errors as ReadAdminToken.
absl::StatusOr<std::string> LoadAdminToken(const std::string& file, const char* env);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ADMIN_ADMIN_AUTH_H_
