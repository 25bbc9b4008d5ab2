#include "server/admin_auth.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/log.h"

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

absl::Status AdminAuthenticator::Authorize(std::optional<absl::string_view> authorization) const {
  if (!authorization) {
    return absl::UnauthenticatedError("admin call requires metadata authorization: Bearer <token>");
  }
  constexpr absl::string_view kScheme = "Bearer ";
  if (!absl::StartsWithIgnoreCase(*authorization, kScheme)) {
    return absl::UnauthenticatedError("authorization metadata must be \"Bearer <token>\"");
  }
  if (token_.empty()) {
    return absl::PermissionDeniedError(
        "administration is disabled: the server was started without an admin token");
  }
  const absl::string_view presented =
      absl::StripAsciiWhitespace(authorization->substr(kScheme.size()));
  if (!ConstantTimeEquals(presented, token_)) {
    return absl::PermissionDeniedError("admin token does not match");
  }
  return absl::OkStatus();
}

std::string AdminTokenFileWarning(const std::string& file) {
  struct stat st;
  if (::stat(file.c_str(), &st) != 0 || (st.st_mode & 077) == 0) return "";
  return absl::StrFormat(
      "admin token file %s has mode %04o: other local users can read the admin token; chmod "
      "600 it",
      file, st.st_mode & 07777);
}

absl::StatusOr<std::string> LoadAdminToken(const std::string& file, const char* env) {
  if (!file.empty()) {
    if (const std::string warning = AdminTokenFileWarning(file); !warning.empty()) {
      Log(LogLevel::kWarning, warning);
    }
    std::ifstream in(file);
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::NotFoundError(absl::StrCat("cannot read admin token file ", file));
    }
    std::string token(absl::StripAsciiWhitespace(line));
    if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(file, ": token is empty"));
    return token;
  }
  if (env != nullptr) {
    if (const char* v = std::getenv(env); v != nullptr) {
      return std::string(absl::StripAsciiWhitespace(v));
    }
  }
  return std::string();
}

}  // namespace ratelimit
