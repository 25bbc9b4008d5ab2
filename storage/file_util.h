#ifndef RATELIMIT_STORAGE_FILE_UTIL_H_
#define RATELIMIT_STORAGE_FILE_UTIL_H_

// Whole-file read and atomic write, shared by the server, the client tool, the benchmarks and the
// tests. Part of the `ratelimit_file_util` target, which depends only on absl.
//
// Thread safety: the functions keep no state; concurrent calls on different paths are safe.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ratelimit {

// The whole contents of the file at `path`, bytes as they are.
// NOT_FOUND when the file cannot be opened (missing or unreadable); FAILED_PRECONDITION for a
// directory (which would otherwise read as empty); INTERNAL when reading fails part way.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` to `path` so that a reader sees the old file or the whole new one, never a
// part: the bytes go to `path + ".tmp"`, which is then renamed over `path`.
// INTERNAL naming the file when writing or renaming fails (the temporary file is then removed).
// Not durable across power loss (no fsync): meant for port files, counters and test fixtures.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_FILE_UTIL_H_
