#include "storage/admin_token.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ratelimit {

std::string AdminTokenFileWarning(const std::string& file) {
  struct stat st;
  if (::stat(file.c_str(), &st) != 0 || (st.st_mode & 077) == 0) return "";
  return absl::StrFormat(
      "admin token file %s has mode %04o: other local users can read the admin token; chmod "
      "600 it",
      file, st.st_mode & 07777);
}

absl::StatusOr<AdminTokenSource> ReadAdminToken(const std::string& file, const char* env) {
  AdminTokenSource source;
  if (!file.empty()) {
    source.warning = AdminTokenFileWarning(file);
    std::ifstream in(file);
    std::string line;
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read admin token file ", file));
    // A file of no bytes at all has no first line: empty, like a blank one.
    if (!std::getline(in, line)) line.clear();
    source.token = std::string(absl::StripAsciiWhitespace(line));
    if (source.token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": token is empty"));
    }
    return source;
  }
  if (env != nullptr) {
    if (const char* v = std::getenv(env); v != nullptr) {
      source.token = std::string(absl::StripAsciiWhitespace(v));
    }
  }
  return source;
}

}  // namespace ratelimit
