#include "server/admin/admin_auth.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/observability/log.h"
#include "server/tls/tls.h"

namespace ratelimit {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Walk all of `b`, reading `a` cyclically, and fold the length difference into the result.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = a.empty() ? 0 : static_cast<unsigned char>(a[i % a.size()]);
    diff |= x ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

std::string AdministrationDisabled(absl::string_view method) {
  return absl::StrCat(method,
                      " is disabled: the server was started without an admin token "
                      "(--admin_token_file or $RATELIMIT_ADMIN_TOKEN) or admin identities "
                      "(--admin_identities)");
}

absl::Status AdminAuthenticator::Authorize(std::optional<absl::string_view> authorization,
                                           absl::string_view method) const {
  // Checked first: no credential could help, and the caller should be told so.
  if (!enabled()) return absl::PermissionDeniedError(AdministrationDisabled(method));
  if (!authorization) {
    return absl::UnauthenticatedError("admin call requires metadata authorization: Bearer <token>");
  }
  constexpr absl::string_view kScheme = "Bearer ";
  if (!absl::StartsWithIgnoreCase(*authorization, kScheme)) {
    return absl::UnauthenticatedError("authorization metadata must be \"Bearer <token>\"");
  }
  if (token_.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("administration by token is disabled: the server was started without an "
                     "admin token (only the client certificates of admin identities may call ",
                     method, ")"));
  }
  const absl::string_view presented =
      absl::StripAsciiWhitespace(authorization->substr(kScheme.size()));
  if (!ConstantTimeEquals(presented, token_)) {
    return absl::PermissionDeniedError("admin token does not match");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> AdminAuthenticator::AuthorizeCall(
    std::optional<absl::string_view> authorization, absl::Span<const std::string> peer_identities,
    absl::string_view method) const {
  // Disabled administration (no identities) reaches Authorize below, which says so first.
  for (const std::string& identity : peer_identities) {
    if (std::find(identities_.begin(), identities_.end(), identity) != identities_.end()) {
      return absl::StrCat("identity ", identity);
    }
  }
  if (!authorization && !identities_.empty()) {
    if (!peer_identities.empty()) {
      return absl::PermissionDeniedError(
          absl::StrCat("client certificate identity is not an admin identity: ",
                       absl::StrJoin(peer_identities, ", ")));
    }
    return absl::UnauthenticatedError(
        "admin call requires a client certificate with an admin identity or metadata "
        "authorization: Bearer <token>");
  }
  if (absl::Status s = Authorize(authorization, method); !s.ok()) return s;
  return std::string("token");
}

absl::StatusOr<std::string> AdminAuthenticator::AuthorizeRpc(const grpc::ServerContextBase& context,
                                                             const Telemetry::Rpc& rpc,
                                                             LogField subject,
                                                             RepeatedLog& refused_log) const {
  std::optional<absl::string_view> authorization;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  const std::vector<std::string> identities =
      auth ? PeerIdentities(*auth) : std::vector<std::string>();
  absl::StatusOr<std::string> admin = AuthorizeCall(authorization, identities, rpc.method());
  if (!admin.ok()) {
    refused_log.Log({{"peer", context.peer()},
                     {"peer_identities", absl::StrJoin(identities, ",")},
                     std::move(subject),
                     {"reason", std::string(admin.status().message())},
                     {"trace_id", rpc.TraceId()}});
  }
  return admin;
}

absl::StatusOr<std::string> LoadAdminToken(const std::string& file, const char* env) {
  absl::StatusOr<AdminTokenSource> source = ReadAdminToken(file, env);
  if (!source.ok()) return source.status();
  if (!source->warning.empty()) Log(LogLevel::kWarning, source->warning);
  return std::move(source->token);
}

}  // namespace ratelimit
