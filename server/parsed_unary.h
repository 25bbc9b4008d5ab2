#ifndef RATELIMIT_SERVER_PARSED_UNARY_H_
#define RATELIMIT_SERVER_PARSED_UNARY_H_

// gRPC's typed callback methods answer a request body they cannot parse with UNIMPLEMENTED and
// an empty message, before any handler runs. The services therefore register their methods raw
// (grpc::ByteBuffer in and out, the generated WithRawCallbackMethod_* classes) and parse here:
// a body that is not a valid message is INVALID_ARGUMENT naming the message type.

#include <memory>
#include <string>

#include "google/protobuf/arena.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/grpc_thread_hop.h"
#include "server/store_executor.h"

namespace ratelimit {

// Ownership and thread safety: ServeParsed borrows the context and buffers for the call (gRPC
// owns them); it keeps no state and is called on gRPC's callback threads concurrently.

// A parsed call whose answer comes later: the request, the response to fill, and the finish.
//
// The request and the response live on one protobuf arena owned by the call: their fields,
// strings and sub-messages (a Batch reply has hundreds) are carved from a few blocks and freed
// together when the call is released, instead of one heap allocation and free each.
template <typename Request, typename Response>
class PendingUnary {
 public:
  PendingUnary(grpc::ServerUnaryReactor* reactor, grpc::ByteBuffer* response_bytes)
      : arena_(ArenaOptions()),
        request(*google::protobuf::Arena::CreateMessage<Request>(&arena_)),
        response(*google::protobuf::Arena::CreateMessage<Response>(&arena_)),
        reactor_(reactor),
        response_bytes_(response_bytes) {}
  PendingUnary(const PendingUnary&) = delete;
  PendingUnary& operator=(const PendingUnary&) = delete;

 private:
  google::protobuf::Arena arena_;  // declared first: destroyed after everything on it

  static google::protobuf::ArenaOptions ArenaOptions() {
    google::protobuf::ArenaOptions o;
    o.start_block_size = 1024;     // a Consume fits in the first block
    o.max_block_size = 64 * 1024;  // a Batch grows to a few blocks, not hundreds
    return o;
  }

 public:
  Request& request;
  Response& response;

  // Serializes `response` and finishes the call with `status`, from any thread. Call once.
  // Called off a handler's thread (a store's own thread), the reply is serialized here and the
  // call finished on a gRPC thread, with the others finished meanwhile (grpc_thread_hop.h); the
  // call may be released as soon as this returns either way.
  void Finish(const grpc::Status& status) {
    bool own_buffer = false;
    // Serializing a message held in memory fails only past 2 GiB, which a reply never reaches.
    (void)grpc::SerializationTraits<Response>::Serialize(response, response_bytes_, &own_buffer);
    if (GrpcThreadHop::OnHandlerThread()) {
      reactor_->Finish(status);
    } else {
      GrpcThreadHop::Default().Post([reactor = reactor_, status] { reactor->Finish(status); });
    }
  }

 private:
  grpc::ServerUnaryReactor* const reactor_;
  grpc::ByteBuffer* const response_bytes_;
};

// For a handler that answers later: parses the body into a new PendingUnary and passes it to
// `handler(std::unique_ptr<PendingUnary<Request, Response>>)`, which must call its Finish
// exactly once, on any thread, before releasing it. A body that does not parse is finished with
// INVALID_ARGUMENT ("request body is not a valid <type>"). Without an `executor` the handler runs
// here. With one, the body is parsed here, and the handler runs here too when
// `runs_inline(request)` says it never waits (it answers through the store's asynchronous
// path), else on one of the executor's threads, this returning at once.
template <typename Request, typename Response, typename Handler, typename RunsInline>
grpc::ServerUnaryReactor* ServeParsedAsync(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request_bytes,
                                           grpc::ByteBuffer* response_bytes, Handler handler,
                                           StoreExecutor* executor, RunsInline runs_inline) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto parse = [reactor, request_bytes, response_bytes]() {
    auto call = std::make_unique<PendingUnary<Request, Response>>(reactor, response_bytes);
    grpc::ByteBuffer body(*request_bytes);  // shares the slices; Deserialize consumes its buffer
    if (!grpc::SerializationTraits<Request>::Deserialize(&body, &call->request).ok()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "request body is not a valid " + call->request.GetTypeName() +
                                       " (protobuf wire format)"));
      call.reset();
    }
    return call;
  };
  auto serve = [handler](std::unique_ptr<PendingUnary<Request, Response>> call) {
    GrpcThreadHop::HandlerScope on_handler_thread;
    handler(std::move(call));
  };
  if (executor == nullptr) {
    if (auto call = parse()) serve(std::move(call));
    return reactor;
  }
  auto call = parse();
  if (call == nullptr) return reactor;
  if (runs_inline(static_cast<const Request&>(call->request))) {
    serve(std::move(call));
  } else {
    executor->Run([serve, call = std::move(call)]() mutable { serve(std::move(call)); });
  }
  return reactor;
}

// As above, every handler on the executor when there is one.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* ServeParsedAsync(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request_bytes,
                                           grpc::ByteBuffer* response_bytes, Handler handler,
                                           StoreExecutor* executor = nullptr) {
  return ServeParsedAsync<Request, Response>(context, request_bytes, response_bytes,
                                             std::move(handler), executor,
                                             [](const Request&) { return false; });
}

// Parses `request_bytes` as a `Request` and runs `handler(const Request*, Response*)`, which
// fills the response and returns the call's status; serializes the reply into `response_bytes`,
// then finishes the call with that status. A body that does not parse is finished with
// INVALID_ARGUMENT ("request body is not a valid <type>"). With an `executor`, the body is
// parsed here and the handler runs on one of the executor's threads, this returning at once (the
// reply is sent from that thread); without, everything runs here, before returning.
//
// REQUIRES: `handler` is copyable and stays valid until it has run; it must not finish the call
// itself.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* ServeParsed(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request_bytes,
                                      grpc::ByteBuffer* response_bytes, Handler handler,
                                      StoreExecutor* executor = nullptr) {
  return ServeParsedAsync<Request, Response>(
      context, request_bytes, response_bytes,
      [handler](std::unique_ptr<PendingUnary<Request, Response>> call) {
        call->Finish(handler(&call->request, &call->response));
      },
      executor);
}

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_PARSED_UNARY_H_
