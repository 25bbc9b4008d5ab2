#ifndef RATELIMIT_SERVER_SERVING_LISTEN_CHECK_H_
#define RATELIMIT_SERVER_SERVING_LISTEN_CHECK_H_

// Whether a gRPC listening address can be bound, asked before gRPC binds it: gRPC's own failure
// is a nested status dump on standard error ("No address added out of total 1 resolved ...
// Address already in use") and a null server, so the server would report only "cannot listen".
// This names the cause in one line.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ratelimit {

// OK when some address `address` (as --listen takes it: "host:port", "[v6]:port", ":port",
// optionally "dns:", "dns:///", "ipv4:" or "ipv6:" first) resolves to can be bound for TCP now,
// as gRPC binds it (SO_REUSEADDR, no SO_REUSEPORT; the socket is closed again at once).
// UNAVAILABLE "cannot listen on <address>: <the error of the first bind>" when none can. OK
// without a check for what gRPC alone understands: a "unix:" path, a list of addresses, or a
// host that does not resolve here (gRPC then reports it).
absl::Status CheckCanListen(absl::string_view address);

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_LISTEN_CHECK_H_
