#ifndef RATELIMIT_STORAGE_STATUS_UTIL_H_
#define RATELIMIT_STORAGE_STATUS_UTIL_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"
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

// The payload that marks an operation a store cannot decide in one transaction (see
// NotOneTransactionError).
inline constexpr char kNotOneTransactionPayload[] = "type.ratelimit/NotOneTransaction";

// FAILED_PRECONDITION for an operation whose keys this store cannot decide in one transaction (on
// a Redis Cluster, keys on different hash slots), marked so that a caller that can split the
// operation safely tells it from any other failed precondition (IsNotOneTransaction).
inline absl::Status NotOneTransactionError(absl::string_view message) {
  absl::Status status = absl::FailedPreconditionError(message);
  status.SetPayload(kNotOneTransactionPayload, absl::Cord());
  return status;
}

inline bool IsNotOneTransaction(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) &&
         status.GetPayload(kNotOneTransactionPayload).has_value();
}

}  // namespace ratelimit

#endif  // RATELIMIT_STORAGE_STATUS_UTIL_H_
