#include "server/observability/metrics.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ratelimit {
namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatDouble(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  // The shortest of %.15g / %.17g that reads back as the same double.
  std::string out = absl::StrFormat("%.15g", v);
  if (std::strtod(out.c_str(), nullptr) != v) out = absl::StrFormat("%.17g", v);
  return out;
}

// {a="x",b="y"} with an optional extra label (for `le`).
std::string Labels(const std::vector<std::string>& names, const std::vector<std::string>& values,
                   const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "" : ",", names[i], "=\"", EscapeLabel(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", extra_name, "=\"", extra_value, "\"");
  }
  return out.empty() ? out : "{" + out + "}";
}

// The index of `label` in `labels`; -1 when empty or absent.
int LabelIndex(const std::vector<std::string>& labels, absl::string_view label) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!label.empty() && labels[i] == label) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

Histogram::Histogram(const std::vector<double>& bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_micro_.fetch_add(static_cast<uint64_t>(std::llround(std::max(0.0, v) * 1e6)),
                       std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(total);
  }
  s.count = total;
  s.sum = static_cast<double>(sum_micro_.load(std::memory_order_relaxed)) / 1e6;
  return s;
}

std::vector<std::string> OverflowLabels(const std::vector<std::string>& values, int capped_label) {
  if (capped_label < 0 || capped_label >= static_cast<int>(values.size())) {
    return std::vector<std::string>(values.size(), "_other");
  }
  std::vector<std::string> out = values;
  out[capped_label] = "_other";
  return out;
}

Family<Counter>& MetricsRegistry::AddCounter(std::string name, std::string help,
                                             std::vector<std::string> labels, size_t max_series,
                                             absl::string_view capped_label) {
  Entry e;
  e.name = std::move(name);
  e.help = std::move(help);
  const int capped = LabelIndex(labels, capped_label);
  e.counter = std::make_unique<Family<Counter>>(
      std::move(labels), max_series, [] { return std::make_unique<Counter>(); }, capped);
  entries_.push_back(std::move(e));
  return *entries_.back().counter;
}

Family<Histogram>& MetricsRegistry::AddHistogram(std::string name, std::string help,
                                                 std::vector<std::string> labels,
                                                 std::vector<double> bounds, size_t max_series) {
  Entry e;
  e.name = std::move(name);
  e.help = std::move(help);
  e.histogram = std::make_unique<Family<Histogram>>(
      std::move(labels), max_series, [bounds] { return std::make_unique<Histogram>(bounds); });
  entries_.push_back(std::move(e));
  return *entries_.back().histogram;
}

void MetricsRegistry::AddGauge(std::string name, std::string help, std::function<double()> read) {
  Entry e;
  e.name = std::move(name);
  e.help = std::move(help);
  e.gauge = std::move(read);
  entries_.push_back(std::move(e));
}

void MetricsRegistry::AddCounterFn(std::string name, std::string help,
                                   std::function<double()> read) {
  AddGauge(std::move(name), std::move(help), std::move(read));
  entries_.back().gauge_is_counter = true;
}

void MetricsRegistry::AddCollector(std::string name, std::string help, std::string type,
                                   std::vector<std::string> labels, std::function<Samples()> read,
                                   size_t max_series, absl::string_view capped_label) {
  Entry e;
  e.collector_capped_label = LabelIndex(labels, capped_label);
  e.name = std::move(name);
  e.help = std::move(help);
  e.collector_type = std::move(type);
  e.collector_labels = std::move(labels);
  e.collector = std::move(read);
  e.collector_max_series = max_series;
  entries_.push_back(std::move(e));
}

std::string MetricsRegistry::Render() const {
  std::string out;
  for (const Entry& e : entries_) {
    absl::StrAppend(&out, "# HELP ", e.name, " ", EscapeHelp(e.help), "\n");
    if (e.counter) {
      absl::StrAppend(&out, "# TYPE ", e.name, " counter\n");
      e.counter->ForEach([&](const std::vector<std::string>& values, const Counter& c) {
        absl::StrAppend(&out, e.name, Labels(e.counter->label_names(), values), " ", c.value(),
                        "\n");
      });
    } else if (e.histogram) {
      absl::StrAppend(&out, "# TYPE ", e.name, " histogram\n");
      e.histogram->ForEach([&](const std::vector<std::string>& values, const Histogram& h) {
        const Histogram::Snapshot s = h.Read();
        const auto& names = e.histogram->label_names();
        for (size_t i = 0; i < h.bounds().size(); ++i) {
          absl::StrAppend(&out, e.name, "_bucket",
                          Labels(names, values, "le", FormatDouble(h.bounds()[i])), " ",
                          s.cumulative[i], "\n");
        }
        absl::StrAppend(&out, e.name, "_bucket", Labels(names, values, "le", "+Inf"), " ", s.count,
                        "\n");
        absl::StrAppend(&out, e.name, "_sum", Labels(names, values), " ", FormatDouble(s.sum),
                        "\n");
        absl::StrAppend(&out, e.name, "_count", Labels(names, values), " ", s.count, "\n");
      });
    } else if (e.collector) {
      absl::StrAppend(&out, "# TYPE ", e.name, " ", e.collector_type, "\n");
      std::map<std::vector<std::string>, double> series;
      for (auto& [values, v] : e.collector()) {
        if (series.size() >= e.collector_max_series && !series.count(values)) {
          series[OverflowLabels(values, e.collector_capped_label)] += v;
        } else {
          series[values] += v;
        }
      }
      for (const auto& [values, v] : series) {
        absl::StrAppend(&out, e.name, Labels(e.collector_labels, values), " ", FormatDouble(v),
                        "\n");
      }
    } else {
      absl::StrAppend(&out, "# TYPE ", e.name, e.gauge_is_counter ? " counter\n" : " gauge\n");
      absl::StrAppend(&out, e.name, " ", FormatDouble(e.gauge()), "\n");
    }
  }
  return out;
}

std::vector<double> LatencyBuckets() {
  return {0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
          0.01,     0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5};
}

}  // namespace ratelimit
