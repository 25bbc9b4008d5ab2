// Google Benchmark: the cost of the receipts an allowed Consume or Reserve carries — signing one
// (HMAC-SHA256 over the encoded take), verifying one, and drawing its unique id.
#include <string>

#include "benchmark/benchmark.h"
#include "server/v1/receipt.h"

namespace ratelimit {
namespace {

ReceiptKeys Keys() { return ReceiptKeys(std::string(32, 'k'), {std::string(32, 'p')}); }

Receipt TypicalReceipt() {
  Receipt r;
  r.source = LimitSource::kDefined;
  r.mode = Mode::kConsume;
  r.name = "api";
  r.key = "user-1234567";
  r.count = 1;
  r.decided_at_us = 1'700'000'000'000'000;
  r.unique_id = NewReceiptId();
  return r;
}

void BM_Sign(benchmark::State& state) {
  const ReceiptKeys keys = Keys();
  Receipt r = TypicalReceipt();
  for (auto _ : state) {
    ++r.decided_at_us;
    benchmark::DoNotOptimize(keys.Sign(r));
  }
}
BENCHMARK(BM_Sign)->Threads(1)->Threads(2);

void BM_Verify(benchmark::State& state) {
  const ReceiptKeys keys = Keys();
  const std::string signed_receipt = keys.Sign(TypicalReceipt());
  for (auto _ : state) benchmark::DoNotOptimize(keys.Verify(signed_receipt, "receipt"));
}
BENCHMARK(BM_Verify)->Threads(1)->Threads(2);

void BM_NewReceiptId(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(NewReceiptId());
}
BENCHMARK(BM_NewReceiptId)->Threads(1)->Threads(2);

}  // namespace
}  // namespace ratelimit

BENCHMARK_MAIN();
