#include "server/envoy/xds/xds_client.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "server/envoy/xds/xds_convert.h"
#include "server/observability/log.h"

namespace ratelimit {
namespace {

namespace discovery = ::envoy::service::discovery::v3;

}  // namespace

absl::StatusOr<std::unique_ptr<EnvoyXdsClient>> EnvoyXdsClient::Create(
    EnvoyXdsOptions options, EnvoyConfigRegistry& registry, UpdateObserver observer) {
  absl::StatusOr<XdsChannelSpec> spec = MakeXdsChannelSpec(options);
  if (!spec.ok()) return spec.status();
  return std::unique_ptr<EnvoyXdsClient>(
      new EnvoyXdsClient(std::move(options), *std::move(spec), registry, std::move(observer)));
}

EnvoyXdsClient::EnvoyXdsClient(EnvoyXdsOptions options, XdsChannelSpec spec,
                               EnvoyConfigRegistry& registry, UpdateObserver observer)
    : options_(std::move(options)),
      spec_(std::move(spec)),
      registry_(registry),
      observer_(std::move(observer)),
      backoff_(options_.retry_initial) {}

EnvoyXdsClient::~EnvoyXdsClient() { Stop(); }

void EnvoyXdsClient::Start() {
  Log(LogLevel::kInfo, "envoy xds client starting",
      {{"server", options_.server},
       {"node_id", options_.node_id},
       {"tls", options_.tls ? (options_.tls_cert_file.empty() ? "tls" : "mtls") : "off"}});
  thread_ = std::thread([this] { Run(); });
}

void EnvoyXdsClient::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (stream_context_ != nullptr) stream_context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

EnvoyXdsClient::Stats EnvoyXdsClient::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Duration EnvoyXdsClient::NextDelay() {
  thread_local absl::BitGen bitgen;
  const absl::Duration d = backoff_;
  backoff_ = std::min(backoff_ * 2, options_.retry_max);
  // Drawn in [d/2, d], so that clients that failed together do not reconnect together.
  return d * absl::Uniform(bitgen, 0.5, 1.0);
}

void EnvoyXdsClient::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const StreamEnd end = RunStream();
    if (end.received) backoff_ = options_.retry_initial;
    const absl::Duration delay = NextDelay();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    Log(LogLevel::kWarning, "envoy xds stream ended; reconnecting",
        {{"server", options_.server},
         {"code", std::to_string(end.status.error_code())},
         {"error", end.status.error_message()},
         {"retry_in", absl::FormatDuration(delay)}});
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), delay);
  }
}

discovery::DiscoveryRequest EnvoyXdsClient::NewRequest(bool with_node) const {
  discovery::DiscoveryRequest request;
  request.set_type_url(kRateLimitConfigTypeUrl);
  {
    absl::MutexLock lock(&mu_);
    request.set_version_info(stats_.version);
  }
  if (with_node) {
    auto* node = request.mutable_node();
    node->set_id(options_.node_id);
    auto* fields = node->mutable_metadata()->mutable_fields();
    for (const auto& [key, value] : options_.node_metadata) {
      (*fields)[key].set_string_value(value);
    }
  }
  return request;
}

EnvoyXdsClient::StreamEnd EnvoyXdsClient::RunStream() {
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return StreamEnd{};
    stream_context_ = &context;
  }
  auto stub = discovery::AggregatedDiscoveryService::NewStub(NewXdsChannel(options_, spec_));
  auto stream = stub->StreamAggregatedResources(&context);
  bool received = false;
  if (stream->Write(NewRequest(/*with_node=*/true))) {
    discovery::DiscoveryResponse response;
    while (stream->Read(&response)) {
      if (!received) {
        received = true;
        absl::MutexLock lock(&mu_);
        stats_.connected = true;
      }
      if (!stream->Write(Handle(response))) break;
    }
  }
  stream->WritesDone();
  StreamEnd end{received, stream->Finish()};
  absl::MutexLock lock(&mu_);
  stream_context_ = nullptr;
  stats_.connected = false;
  return end;
}

discovery::DiscoveryRequest EnvoyXdsClient::Handle(const discovery::DiscoveryResponse& response) {
  absl::StatusOr<EnvoyConfig> config =
      response.type_url() == kRateLimitConfigTypeUrl
          ? BuildEnvoyConfigFromResources(response.resources())
          : absl::InvalidArgumentError(absl::StrCat("type_url: \"", response.type_url(),
                                                    "\" was not asked for (expected ",
                                                    kRateLimitConfigTypeUrl, ")"));
  absl::Status outcome = config.status();
  if (config.ok()) {
    const size_t domains = config->domains.size();
    registry_.Replace(std::make_shared<const EnvoyConfig>(*std::move(config)));
    {
      absl::MutexLock lock(&mu_);
      stats_.version = response.version_info();
      ++stats_.applied;
    }
    Log(LogLevel::kInfo, "envoy xds config applied",
        {{"version", response.version_info()},
         {"resources", std::to_string(response.resources_size())},
         {"domains", std::to_string(domains)}});
  } else {
    {
      absl::MutexLock lock(&mu_);
      ++stats_.rejected;
    }
    Log(LogLevel::kError, "envoy xds config rejected; keeping the previous configuration",
        {{"version", response.version_info()}, {"error", std::string(outcome.message())}});
  }
  if (observer_) observer_(outcome);
  // ACK: the version just applied; NACK: the version still in force, with the reason.
  discovery::DiscoveryRequest request = NewRequest(/*with_node=*/false);
  request.set_response_nonce(response.nonce());
  if (!outcome.ok()) {
    request.mutable_error_detail()->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
    request.mutable_error_detail()->set_message(std::string(outcome.message()));
  }
  return request;
}

}  // namespace ratelimit
