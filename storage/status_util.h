#ifndef RATELIMIT_STORAGE_STATUS_UTIL_H_
#define RATELIMIT_STORAGE_STATUS_UTIL_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ratelimit {

// INVALID_ARGUMENT with the message "<field>: <why>", the form every validator in the service
// uses so that the caller can tell which field to fix.
inline absl::Status InvalidField(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// The same for the field named `field` followed by `leaf` ("limits[0]" ".name"): validators on
// the hot path take the two parts and join them only for an error.
inline absl::Status InvalidField(absl::string_view field, absl::string_view leaf,
                                 absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, leaf, ": ", why));
}

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_STATUS_UTIL_H_
