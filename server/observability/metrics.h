#ifndef RATELIMIT_SERVER_OBSERVABILITY_METRICS_H_
#define RATELIMIT_SERVER_OBSERVABILITY_METRICS_H_

// A small metrics library: counters, histograms and callback gauges, in labelled families,
// rendered in the Prometheus text exposition format (version 0.0.4).

#include <atomic>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ratelimit {

// A monotonically increasing count. Thread-safe, lock-free.
class Counter {
 public:
  void Increment(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// Observations counted into fixed buckets (upper bounds, increasing), with their sum.
// Thread-safe, lock-free.
class Histogram {
 public:
  explicit Histogram(const std::vector<double>& bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<uint64_t> sum_micro_{0};                // sum in millionths, to stay lock-free
};

// The label values a new series is recorded under once a family holds its maximum number of
// series: the value of the label at index `capped_label` (the one whose values clients choose,
// such as limit names) becomes "_other" and the others (from small fixed sets, such as
// outcomes) are kept; with no capped label (-1) every value becomes "_other".
std::vector<std::string> OverflowLabels(const std::vector<std::string>& values, int capped_label);

// A family of series of one metric, one per combination of label values. Once `max_series`
// series exist, further combinations are folded per OverflowLabels, so that client-chosen values
// (limit names) cannot blow up the cardinality while the other labels keep their meaning.
//
// Ownership: owns its series; With() returns references that stay valid for the family's
// lifetime. Thread safety: thread-safe.
template <typename T>
class Family {
 public:
  Family(std::vector<std::string> label_names, size_t max_series,
         std::function<std::unique_ptr<T>()> make, int capped_label = -1)
      : label_names_(std::move(label_names)),
        max_series_(max_series),
        capped_label_(capped_label),
        make_(std::move(make)) {}

  // The series for `values` (one per label name). The reference stays valid for the family's
  // lifetime. Finding an existing series allocates nothing when the joined values fit
  // kJoinedOnStack bytes.
  T& With(std::initializer_list<absl::string_view> values) {
    absl::InlinedVector<char, kJoinedOnStack> joined;
    for (absl::string_view v : values) {
      joined.insert(joined.end(), v.begin(), v.end());
      joined.push_back('\xff');
    }
    const std::string_view key(joined.data(), joined.size());
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = series_.find(key);
      if (it != series_.end()) return *it->second.metric;
    }
    absl::MutexLock lock(&mu_);
    auto it = series_.find(key);
    if (it != series_.end()) return *it->second.metric;
    if (series_.size() >= max_series_) {
      std::vector<std::string> other =
          OverflowLabels(std::vector<std::string>(values.begin(), values.end()), capped_label_);
      Series& slot = series_[Join(other)];
      if (!slot.metric) {
        slot.values = std::move(other);
        slot.metric = make_();
      }
      return *slot.metric;
    }
    Series& slot = series_[std::string(key)];
    for (absl::string_view v : values) slot.values.emplace_back(v);
    slot.metric = make_();
    return *slot.metric;
  }

  const std::vector<std::string>& label_names() const { return label_names_; }

  // Calls `f(values, series)` for every series, in label order.
  template <typename F>
  void ForEach(F f) const {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [key, series] : series_) f(series.values, *series.metric);
  }

 private:
  struct Series {
    std::vector<std::string> values;
    std::unique_ptr<T> metric;
  };

  // Label values joined by a byte that cannot occur in UTF-8 text, so the join is unambiguous
  // and sorts like the value lists.
  template <typename Values>
  static std::string Join(const Values& values) {
    std::string key;
    for (absl::string_view v : values) {
      key.append(v.data(), v.size());
      key.push_back('\xff');
    }
    return key;
  }

  static constexpr size_t kJoinedOnStack = 256;

  const std::vector<std::string> label_names_;
  const size_t max_series_;
  const int capped_label_;
  const std::function<std::unique_ptr<T>()> make_;
  mutable absl::Mutex mu_;
  // Keyed by the joined values; found by a view of them (std::less<>).
  std::map<std::string, Series, std::less<>> series_ ABSL_GUARDED_BY(mu_);
};

// Owns metric families and renders them; the references Add* return stay valid for the
// registry's lifetime, and the functions given to AddGauge/AddCollector/AddCounterFn are kept
// and called by Render() (what they read must outlive the registry or be removed with it).
// Thread safety: families are added at start-up (not thread-safe); recording into them and
// Render() are thread-safe.
class MetricsRegistry {
 public:
  // `capped_label`: the label folded into "_other" past `max_series` (see OverflowLabels); empty:
  // all of them.
  Family<Counter>& AddCounter(std::string name, std::string help, std::vector<std::string> labels,
                              size_t max_series = 1000, absl::string_view capped_label = "");
  Family<Histogram>& AddHistogram(std::string name, std::string help,
                                  std::vector<std::string> labels, std::vector<double> bounds,
                                  size_t max_series = 100);
  // A gauge read when rendered.
  void AddGauge(std::string name, std::string help, std::function<double()> read);
  // Series computed when rendered: `read` returns (label values, value) pairs. `type` is
  // "counter" or "gauge". At most `max_series` series are rendered as they are; the rest are
  // summed into series folded per OverflowLabels (`capped_label` as in AddCounter).
  using Samples = std::vector<std::pair<std::vector<std::string>, double>>;
  void AddCollector(std::string name, std::string help, std::string type,
                    std::vector<std::string> labels, std::function<Samples()> read,
                    size_t max_series = 2000, absl::string_view capped_label = "");
  // A counter kept elsewhere (monotonic), read when rendered.
  void AddCounterFn(std::string name, std::string help, std::function<double()> read);

  // The Prometheus text exposition of every metric.
  std::string Render() const;

 private:
  struct Entry {
    std::string name, help;
    std::unique_ptr<Family<Counter>> counter;
    std::unique_ptr<Family<Histogram>> histogram;
    std::function<double()> gauge;
    bool gauge_is_counter = false;
    std::string collector_type;
    std::vector<std::string> collector_labels;
    std::function<Samples()> collector;
    size_t collector_max_series = 0;
    int collector_capped_label = -1;
  };
  std::vector<Entry> entries_;
};

// Latency buckets in seconds, 25us .. 2.5s.
std::vector<double> LatencyBuckets();

}  // namespace ratelimit

#endif  // RATELIMIT_SERVER_OBSERVABILITY_METRICS_H_
