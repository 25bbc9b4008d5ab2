#ifndef RATELIMIT_SERVER_RLQS_RLQS_HORIZON_H_
#define RATELIMIT_SERVER_RLQS_RLQS_HORIZON_H_

// RlqsHorizon: how a server that restarts after a crash keeps the assignments its previous
// process sent within the global rate. Envoys go on enforcing those until they expire, and the
// new process does not know them; so the server records, in a file of its data directory, a time
// no limited assignment it sent outlives (written before the assignments are sent, ahead of them
// by kSlackMicros so that it is written about once per slack, not per push). A process that
// starts and finds that time still ahead sends no limited assignment until it has passed: the
// Envoys enforce their old ones until then, and new ones fall back to their
// no_assignment_behavior, as they do before any assignment. A graceful stop, which sends every
// assignment again with a time to live of 0, writes the time its remaining ones end instead
// (those of streams that ended, which no message reaches).
//
// One server owning its store (RocksDB) only: replicas sharing Redis have the board instead.
// Thread safety: none; the owner serializes calls (RlqsService's mutex).

#include <cstdint>
#include <string>

#include "server/observability/repeated_log.h"

namespace ratelimit {

class RlqsHorizon {
 public:
  static constexpr int64_t kSlackMicros = 10'000'000;

  // `path` empty: records nothing and never holds.
  explicit RlqsHorizon(std::string path);

  // The time the previous process's limited assignments may last until (0: none, or no
  // readable record: a missing or malformed file holds nothing back, and is logged when
  // malformed).
  int64_t Load();
  // Makes the record cover an assignment lasting until `until_us`, writing it (ahead by
  // kSlackMicros) when it does not already. A failed write (a full disk) is tried again at the
  // next call and logged through a RepeatedLog, since it fails at every push until the disk has
  // room; the assignments go out regardless.
  void Cover(int64_t until_us);
  // A graceful stop: the record says `until_us` (the latest end of an assignment no message can
  // reach any more; 0: none), and Cover writes nothing after it.
  void Close(int64_t until_us);

  int64_t recorded_us() const { return recorded_us_; }

 private:
  bool Write(int64_t until_us);

  const std::string path_;
  RepeatedLog write_failed_{LogLevel::kWarning, "rlqs: cannot record the assignments sent"};
  int64_t recorded_us_ = 0;
  bool closed_ = false;
};

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_RLQS_RLQS_HORIZON_H_
