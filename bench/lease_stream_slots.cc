#include "bench/lease_stream_slots.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"

namespace ratelimit::bench {

// What a completion of a stream's tag is: its start, its write (a Write or the WritesDone), its
// Read, or its Finish.
struct LeaseStreamSlots::Tag {
  enum Kind { kStart, kWrite, kRead, kFinish };
  Stream* stream;
  Kind kind;
};

struct LeaseStreamSlots::Stream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::LeaseStreamRequest, v1::LeaseStreamResponse>>
      rw;
  Tag start_tag{this, Tag::kStart};
  Tag write_tag{this, Tag::kWrite};
  Tag read_tag{this, Tag::kRead};
  Tag finish_tag{this, Tag::kFinish};
  std::vector<int> slots;
  v1::LeaseStreamRequest queued;    // ops waiting for the next write
  v1::LeaseStreamRequest writing;   // the message of the write in flight
  v1::LeaseStreamResponse results;  // the message of the outstanding Read
  bool started = false;
  bool write_in_flight = true;  // the start, until it completes
  bool handling_results = false;
  bool closing = false;
  bool writes_done = false;
  bool broken = false;     // a write failed: the stream is ending
  bool read_done = false;  // the server has ended the stream (or it never started)
  bool finishing = false;
  bool finished = false;
  grpc::Status status;
};

LeaseStreamSlots::LeaseStreamSlots(grpc::CompletionQueue* cq, const std::vector<Stub*>& slot_stubs,
                                   absl::Time deadline, ResultFn on_result,
                                   StreamErrorFn on_stream_error)
    : cq_(cq),
      on_result_(std::move(on_result)),
      on_stream_error_(std::move(on_stream_error)),
      slot_stream_(slot_stubs.size()),
      slot_op_id_(slot_stubs.size(), 0) {
  std::map<Stub*, Stream*> by_stub;
  for (size_t slot = 0; slot < slot_stubs.size(); ++slot) {
    Stream*& stream = by_stub[slot_stubs[slot]];
    if (stream == nullptr) {
      streams_.push_back(std::make_unique<Stream>());
      stream = streams_.back().get();
      stream->context.set_deadline(absl::ToChronoTime(deadline));
      stream->rw = slot_stubs[slot]->PrepareAsyncLeaseStream(&stream->context, cq_);
      stream->rw->StartCall(&stream->start_tag);
    }
    stream->slots.push_back(static_cast<int>(slot));
    slot_stream_[slot] = stream;
  }
}

LeaseStreamSlots::~LeaseStreamSlots() = default;

bool LeaseStreamSlots::Acquire(int slot, const v1::AcquireRequest& request) {
  v1::LeaseOp* op = NewOp(slot);
  if (op == nullptr) return false;
  *op->mutable_acquire() = request;
  Flush(*slot_stream_[slot]);
  return true;
}

bool LeaseStreamSlots::Release(int slot, const v1::ReleaseRequest& request) {
  v1::LeaseOp* op = NewOp(slot);
  if (op == nullptr) return false;
  *op->mutable_release() = request;
  Flush(*slot_stream_[slot]);
  return true;
}

v1::LeaseOp* LeaseStreamSlots::NewOp(int slot) {
  Stream& stream = *slot_stream_[slot];
  if (stream.closing || stream.broken || stream.read_done) return nullptr;
  // Unique, never 0, and the slot is the id modulo the number of slots.
  const uint64_t id = ++op_sequence_ * slot_op_id_.size() + static_cast<uint64_t>(slot);
  slot_op_id_[slot] = id;
  v1::LeaseOp* op = stream.queued.add_ops();
  op->set_id(id);
  return op;
}

void LeaseStreamSlots::Proceed(void* tag, bool ok) {
  const Tag& done = *static_cast<Tag*>(tag);
  Stream& stream = *done.stream;
  switch (done.kind) {
    case Tag::kStart:
      stream.write_in_flight = false;
      if (ok) {
        stream.started = true;
        stream.rw->Read(&stream.results, &stream.read_tag);
        Flush(stream);
      } else {
        stream.read_done = true;  // no Read can be made on a call that did not start
      }
      break;
    case Tag::kWrite:
      stream.write_in_flight = false;
      if (ok) {
        Flush(stream);
      } else {
        stream.broken = true;
      }
      break;
    case Tag::kRead:
      if (!ok) {
        stream.read_done = true;
        break;
      }
      HandleResults(stream);
      stream.rw->Read(&stream.results, &stream.read_tag);
      Flush(stream);
      break;
    case Tag::kFinish:
      stream.finished = true;
      if (!stream.status.ok()) {
        on_stream_error_(absl::StrCat("LeaseStream ", stream.status.error_code(), ": ",
                                      stream.status.error_message()));
      }
      FailUnanswered(stream);
      return;
  }
  MaybeFinish(stream);
}

void LeaseStreamSlots::CloseAll() {
  for (const auto& stream : streams_) {
    if (stream->closing) continue;
    stream->closing = true;
    Flush(*stream);
    MaybeFinish(*stream);
  }
}

bool LeaseStreamSlots::finished() const {
  for (const auto& stream : streams_) {
    if (!stream->finished) return false;
  }
  return true;
}

void LeaseStreamSlots::Flush(Stream& stream) {
  if (!stream.started || stream.write_in_flight || stream.broken || stream.handling_results ||
      stream.writes_done) {
    return;
  }
  if (stream.queued.ops_size() == 0) {
    if (stream.closing && !stream.read_done) {
      stream.writes_done = true;
      stream.write_in_flight = true;
      stream.rw->WritesDone(&stream.write_tag);
    }
    return;
  }
  // The queued ops that fit in one message: each is encoded as field 1 (a one-byte tag), its
  // length and its bytes.
  int count = 0;
  size_t bytes = 0;
  for (const v1::LeaseOp& op : stream.queued.ops()) {
    const size_t size = op.ByteSizeLong();
    const size_t encoded = 1 + google::protobuf::io::CodedOutputStream::VarintSize64(size) + size;
    if (count == kMaxOpsPerMessage || (count > 0 && bytes + encoded > kMaxMessageBytes)) break;
    bytes += encoded;
    ++count;
  }
  // They become the message written; the cleared ops of the previous message are kept for the
  // next ones to reuse.
  stream.writing.Clear();
  if (count == stream.queued.ops_size()) {
    stream.writing.Swap(&stream.queued);
  } else {
    auto* ops = stream.queued.mutable_ops();
    for (int i = 0; i < count; ++i) stream.writing.add_ops()->Swap(ops->Mutable(i));
    ops->DeleteSubrange(0, count);
  }
  stream.write_in_flight = true;
  stream.rw->Write(stream.writing, &stream.write_tag);
}

void LeaseStreamSlots::MaybeFinish(Stream& stream) {
  if (!stream.read_done || stream.write_in_flight || stream.finishing) return;
  stream.finishing = true;
  stream.rw->Finish(&stream.status, &stream.finish_tag);
}

void LeaseStreamSlots::HandleResults(Stream& stream) {
  // The ops the results lead to are queued until every result has been handled, then written
  // together by the caller's Flush.
  stream.handling_results = true;
  const uint64_t slots = slot_op_id_.size();
  for (const v1::LeaseOpResult& result : stream.results.results()) {
    const int slot = static_cast<int>(result.id() % slots);
    if (result.id() == 0 || slot_op_id_[slot] != result.id() || slot_stream_[slot] != &stream) {
      on_stream_error_(absl::StrCat("LeaseStream: a result for id ", result.id(),
                                    ", which is no op awaiting one on this stream"));
      continue;
    }
    slot_op_id_[slot] = 0;
    on_result_(slot, result);
  }
  stream.handling_results = false;
}

void LeaseStreamSlots::FailUnanswered(Stream& stream) {
  v1::LeaseOpResult failed;
  if (stream.status.ok()) {
    failed.set_code(grpc::StatusCode::UNKNOWN);
    failed.set_message("the stream ended without answering the op");
  } else {
    failed.set_code(stream.status.error_code());
    failed.set_message(stream.status.error_message());
  }
  for (const int slot : stream.slots) {
    if (slot_op_id_[slot] == 0) continue;
    failed.set_id(slot_op_id_[slot]);
    slot_op_id_[slot] = 0;
    on_result_(slot, failed);
  }
}

}  // namespace ratelimit::bench
