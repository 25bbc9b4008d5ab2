#ifndef RATELIMIT_SERVER_OBSERVABILITY_LIBRARY_LOG_H_
#define RATELIMIT_SERVER_OBSERVABILITY_LIBRARY_LOG_H_

// The libraries' own log lines written as the server's. gRPC's (a listener that cannot bind, a
// transport's complaint): without this, gRPC writes its own format to standard error ("E1205
// 15:20:40.015 11528 chttp2_server.cc:1045] ..."), which breaks a --log_format=json stream and the
// one line a failed start-up promises. Which of gRPC's lines exist is gRPC's setting
// (GRPC_VERBOSITY; Debian's build writes errors only); --log_level then filters them as any other
// line. Protobuf's (a string field of a request that is not UTF-8): without this, protobuf writes
// "[libprotobuf ERROR ...]" to standard error once per such request, a line any caller could add.

#include <string>
#include <vector>

namespace ratelimit {

// From now on, each gRPC log line is one Log line: message "grpc", its text as `detail`, and
// `source` (file:line); gRPC's ERROR as kError, INFO as kInfo, DEBUG as kDebug. Idempotent.
void RouteGrpcLogs();

// From now on, each protobuf log line is one Log line: message "protobuf", `detail` and
// `source`. Its warnings and errors are kDebug: on a running server they are about bytes a
// caller sent, and the caller is answered INVALID_ARGUMENT; a fatal one (protobuf then aborts)
// is kError. Idempotent.
void RouteProtobufLogs();

// While a GrpcLogHold exists, gRPC's lines (once routed) are kept instead of written: a start-up
// that fails reports them in its one failure line (Take); the lines not taken are written when
// the hold ends. At most one hold at a time, on any thread.
class GrpcLogHold {
 public:
  GrpcLogHold();
  ~GrpcLogHold();
  GrpcLogHold(const GrpcLogHold&) = delete;
  GrpcLogHold& operator=(const GrpcLogHold&) = delete;

  // The texts of the lines kept so far, in order; they are no longer kept.
  std::vector<std::string> Take();
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_LIBRARY_LOG_H_
