// ratelimit_null_collector: an OTLP/gRPC trace collector that accepts every batch and discards
// it (opentelemetry.proto.collector.trace.v1.TraceService/Export), counting the spans and the
// Export calls. The sink ratelimit-server's exporter talks to when scripts/bench.sh measures the
// cost of tracing: it answers at once, so what is measured is the server's side of tracing.
// It shares a core with the load generator, so it must cost little: it takes each request as
// raw bytes (a generic service) and counts spans by walking the wire format's outer two levels
// instead of parsing every span into objects.
//
// On SIGTERM or SIGINT it stops, and prints to stderr one line:
//   null collector: <spans> spans in <calls> Export calls
// (also to --count_file, when given, as "<spans> <calls>").
//
// Usage: ratelimit_null_collector [--listen=127.0.0.1:0] [--port_file=FILE] [--count_file=FILE]
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <vector>
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bench/tool_util.h"
#include "grpcpp/grpcpp.h"

#include "grpcpp/generic/async_generic_service.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "host:port to serve on; port 0 picks a free port");
ABSL_FLAG(std::string, port_file, "", "write the chosen port to this file once listening");
ABSL_FLAG(std::string, count_file, "", "at exit, also write \"<spans> <calls>\" to this file");

namespace ratelimit {
namespace {

constexpr char kExportMethod[] = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

// Reads a varint at `*p`; false at the end of the input or on a malformed varint.
bool ReadVarint(const char*& p, const char* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t b = static_cast<uint8_t>(*p++);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Calls `f(field, bytes)` for every length-delimited field of the message in [p, end), skipping
// the others. False on malformed input.
template <typename F>
bool ForEachLenField(const char* p, const char* end, F f) {
  while (p < end) {
    uint64_t tag, n;
    if (!ReadVarint(p, end, &tag)) return false;
    switch (tag & 7) {
      case 0:
        if (!ReadVarint(p, end, &n)) return false;
        break;
      case 1:
        p += 8;
        break;
      case 5:
        p += 4;
        break;
      case 2:
        if (!ReadVarint(p, end, &n) || n > static_cast<uint64_t>(end - p)) return false;
        f(static_cast<int>(tag >> 3), p, p + n);
        p += n;
        break;
      default:
        return false;
    }
  }
  return p == end;
}

// Spans in an encoded ExportTraceServiceRequest: resource_spans (1) > scope_spans (2) > spans (2).
uint64_t CountSpans(const std::string& request) {
  uint64_t spans = 0;
  ForEachLenField(request.data(), request.data() + request.size(),
                  [&](int field, const char* p, const char* end) {
                    if (field != 1) return;
                    ForEachLenField(p, end, [&](int field, const char* p, const char* end) {
                      if (field != 2) return;
                      ForEachLenField(p, end, [&](int field, const char*, const char*) {
                        if (field == 2) ++spans;
                      });
                    });
                  });
  return spans;
}

class NullTraceService final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return new Call(this, ctx->method() == kExportMethod);
  }

  uint64_t spans() const { return spans_.load(std::memory_order_relaxed); }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  // One unary Export: read the request, count it, answer with an empty response.
  class Call final : public grpc::ServerGenericBidiReactor {
   public:
    Call(NullTraceService* service, bool is_export) : service_(service) {
      if (!is_export) {
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "only TraceService/Export"));
        return;
      }
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request"));
        return;
      }
      std::vector<grpc::Slice> slices;
      std::string bytes;
      if (request_.Dump(&slices).ok()) {
        for (const grpc::Slice& s : slices) {
          bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
        }
      }
      service_->spans_.fetch_add(CountSpans(bytes), std::memory_order_relaxed);
      service_->calls_.fetch_add(1, std::memory_order_relaxed);
      // An empty ExportTraceServiceResponse is zero bytes (but a ByteBuffer must hold a slice).
      grpc::Slice empty;
      response_ = grpc::ByteBuffer(&empty, 1);
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    NullTraceService* const service_;
    grpc::ByteBuffer request_;
    grpc::ByteBuffer response_;
  };

  std::atomic<uint64_t> spans_{0};
  std::atomic<uint64_t> calls_{0};
};

int Run() {
  const std::string address = absl::GetFlag(FLAGS_listen);
  // Signals are taken by sigwait below: block them before gRPC starts any thread.
  sigset_t signals = bench::BlockTerminationSignals();

  NullTraceService service;
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(&service);
  // Batches of 512 spans with attributes can exceed gRPC's default 4 MiB limit.
  builder.SetMaxReceiveMessageSize(64 << 20);
  int port = 0;
  std::unique_ptr<grpc::Server> server = bench::ListenAndStart(builder, address, &port);
  if (!server) return 1;
  if (!bench::AnnouncePort("null collector", address, port, absl::GetFlag(FLAGS_port_file))) {
    return 1;
  }

  bench::WaitForSignal(signals);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  const uint64_t spans = service.spans();
  const uint64_t calls = service.calls();
  std::fprintf(stderr, "null collector: %llu spans in %llu Export calls\n",
               static_cast<unsigned long long>(spans), static_cast<unsigned long long>(calls));
  if (const std::string count_file = absl::GetFlag(FLAGS_count_file); !count_file.empty()) {
    if (!WriteFileAtomically(count_file, std::to_string(spans) + " " + std::to_string(calls) + "\n")
             .ok()) {
      std::fprintf(stderr, "cannot write --count_file %s\n", count_file.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace ratelimit

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ratelimit_null_collector [--listen=HOST:PORT] [--port_file=FILE] [--count_file=FILE]: "
      "an OTLP/gRPC trace collector that counts and discards spans, for benchmarks");
  absl::ParseCommandLine(argc, argv);
  return ratelimit::Run();
}
