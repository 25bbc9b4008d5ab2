#ifndef RATELIMIT_SERVER_ENVOY_XDS_XDS_CLIENT_H_
#define RATELIMIT_SERVER_ENVOY_XDS_XDS_CLIENT_H_

// The Envoy configuration from an xDS management server: a state-of-the-world ADS client of
// RateLimitConfig resources (the reference's CONFIG_TYPE=GRPC_XDS_SOTW).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "server/envoy/envoy_registry.h"
#include "server/envoy/xds/xds_channel.h"
#include "server/envoy/xds/xds_options.h"

namespace ratelimit {

// Keeps an EnvoyConfigRegistry in step with a management server. On a thread of its own it
// opens StreamAggregatedResources and sends a DiscoveryRequest for kRateLimitConfigTypeUrl with
// the node (id, metadata) and the version last applied (empty at first). Each response is the
// whole configuration (state of the world): when every resource converts and loads
// (BuildEnvoyConfigFromResources) the result replaces the registry's configuration at once, as
// a reloaded YAML directory does (the state names of unchanged rules stay, and so do their
// counters), and the response is ACKed (its version_info and nonce); otherwise the
// configuration in force stays and the response is NACKed (the version last applied, the
// response's nonce, error_detail {INVALID_ARGUMENT, the loader's error}). Each outcome is logged
// with the version and reported to the observer. When the stream fails or ends, the client
// reconnects after a backoff (EnvoyXdsOptions::retry_*) on a new channel and sends the version
// last applied again. Until the first response is applied the registry keeps what it had (the
// server starts it empty: no domains).
//
// Ownership: `registry` is not owned and must outlive the client; the client owns its thread.
// Thread safety: Start/Stop from the owner's thread; stats() from any thread; the observer is
// called on the client's thread.
class EnvoyXdsClient {
 public:
  // Called after each response with its outcome (OK: applied; else why it was rejected).
  using UpdateObserver = std::function<void(const absl::Status&)>;

  // What the client has done so far.
  struct Stats {
    // version_info of the configuration in force; empty before the first is applied.
    std::string version;
    uint64_t applied = 0;
    uint64_t rejected = 0;
    // A stream is open and has received at least one response.
    bool connected = false;
  };

  // Reads the TLS files (MakeXdsChannelSpec); their error otherwise.
  // REQUIRES: ValidateEnvoyXdsOptions(options) is OK and options.enabled().
  static absl::StatusOr<std::unique_ptr<EnvoyXdsClient>> Create(EnvoyXdsOptions options,
                                                                EnvoyConfigRegistry& registry,
                                                                UpdateObserver observer = nullptr);
  EnvoyXdsClient(const EnvoyXdsClient&) = delete;
  EnvoyXdsClient& operator=(const EnvoyXdsClient&) = delete;
  ~EnvoyXdsClient();  // stops

  // Starts the client's thread. At most once.
  void Start();
  // Cancels the stream, ends the backoff wait and joins the thread. Idempotent.
  void Stop();

  Stats stats() const;

 private:
  EnvoyXdsClient(EnvoyXdsOptions options, XdsChannelSpec spec, EnvoyConfigRegistry& registry,
                 UpdateObserver observer);

  // How a stream ended: whether it delivered a response, and its status.
  struct StreamEnd {
    bool received = false;
    grpc::Status status;
  };

  void Run();
  // One stream, from its first request until it fails or Stop cancels it.
  StreamEnd RunStream();
  // Applies or rejects `response`; returns the request answering it (ACK or NACK).
  ::envoy::service::discovery::v3::DiscoveryRequest Handle(
      const ::envoy::service::discovery::v3::DiscoveryResponse& response);
  ::envoy::service::discovery::v3::DiscoveryRequest NewRequest(bool with_node) const;
  // The next backoff delay, jittered, and the one after it.
  absl::Duration NextDelay();

  const EnvoyXdsOptions options_;
  const XdsChannelSpec spec_;
  EnvoyConfigRegistry& registry_;
  const UpdateObserver observer_;
  absl::Duration backoff_;  // the client's thread only
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* stream_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_ENVOY_XDS_XDS_CLIENT_H_
