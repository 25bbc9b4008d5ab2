#ifndef RATELIMIT_SERVER_SERVING_PARSED_UNARY_H_
#define RATELIMIT_SERVER_SERVING_PARSED_UNARY_H_

// gRPC's typed methods answer a request body they cannot parse with an error of gRPC's choosing
// before any handler runs. The services therefore register their methods raw (grpc::ByteBuffer in
// and out, the generated WithRawMethod_* classes) and parse here: a body that is not a valid
// message is INVALID_ARGUMENT naming the field at fault, or the message type.

#include <memory>
#include <string>
#include <utility>

#include "google/protobuf/arena.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/serving/arena_blocks.h"
#include "server/serving/decision_scheduler.h"
#include "server/serving/serving_loop.h"
#include "server/serving/wire_diagnosis.h"

namespace ratelimit {

// A call of a ServingLoop (serving_loop.h), parsed. The request and the response live on one
// protobuf arena owned by this object: their fields, strings and sub-messages (a Batch reply has
// hundreds) are carved from a few blocks and freed together, instead of one heap allocation and
// free each. The first block is one this thread recycles (arena_blocks.h): a Consume or a lease
// call fits in it, and a Batch or a long list grows to a few blocks, not hundreds.
template <typename Request, typename Response>
class ParsedLoopCall {
 public:
  explicit ParsedLoopCall(LoopCall* call)
      : arena_(RecycledArenaOptions()),
        request(*google::protobuf::Arena::CreateMessage<Request>(&arena_)),
        response(*google::protobuf::Arena::CreateMessage<Response>(&arena_)),
        call_(call) {}
  ParsedLoopCall(const ParsedLoopCall&) = delete;
  ParsedLoopCall& operator=(const ParsedLoopCall&) = delete;

 private:
  google::protobuf::Arena arena_;  // declared first: destroyed after everything on it

 public:
  Request& request;
  Response& response;

  // Parses the call's body into `request`. A body that is not a valid Request finishes the call
  // with INVALID_ARGUMENT naming the field at fault (wire_diagnosis.h) and returns false.
  bool Parse() {
    grpc::ByteBuffer& body = call_->request();
    bool parsed = false;
    {
      grpc::ProtoBufferReader reader(&body);
      parsed = reader.status().ok() && request.ParseFromZeroCopyStream(&reader);
    }
    if (parsed) {
      body.Clear();  // the bytes are no longer needed: the request holds copies
      return true;
    }
    std::string message = UnparsableBodyMessage(*request.GetDescriptor(), body);
    body.Clear();  // before finishing: a finished call may be released at once
    call_->FinishWithError(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message)));
    return false;
  }

  const grpc::ServerContext& context() const { return call_->context(); }

  // Serializes `response` (when `status` is OK) and finishes the call with `status`, from any
  // thread. Call once; this object may be released as soon as it returns.
  void Finish(const grpc::Status& status) {
    grpc::ByteBuffer reply;
    if (status.ok()) {
      bool own_buffer = false;
      // Serializing a message held in memory fails only past 2 GiB, which a reply never reaches.
      (void)grpc::SerializationTraits<Response>::Serialize(response, &reply, &own_buffer);
    }
    call_->Finish(reply, status);
  }

 private:
  LoopCall* const call_;
};

// Serves a call of a ServingLoop: parses the call's body as a `Request` and runs
// `handler(const Request*, Response*)`, which fills the response and returns the call's status,
// then finishes the call. A body that does not parse is finished with INVALID_ARGUMENT. The
// body is parsed here; with `scheduler`, the handler runs where synchronous store calls may wait
// (DecisionScheduler::RunBlocking), else here.
template <typename Request, typename Response, typename Handler>
void ServeLoopParsed(LoopCall* loop_call, Handler handler, DecisionScheduler* scheduler = nullptr) {
  auto call = std::make_unique<ParsedLoopCall<Request, Response>>(loop_call);
  if (!call->Parse()) return;
  if (scheduler == nullptr) {
    call->Finish(handler(&call->request, &call->response));
    return;
  }
  scheduler->RunBlocking([handler, call = std::move(call)]() mutable {
    call->Finish(handler(&call->request, &call->response));
  });
}

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_SERVING_PARSED_UNARY_H_
