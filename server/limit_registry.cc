#include "server/limit_registry.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/log.h"

namespace ratelimit {

std::shared_ptr<const LimitSet> LimitRegistry::Current() const {
  absl::ReaderMutexLock lock(&mu_);
  return current_;
}

void LimitRegistry::Replace(std::shared_ptr<const LimitSet> limits) {
  absl::MutexLock lock(&mu_);
  current_ = std::move(limits);
}

LimitsFileWatcher::LimitsFileWatcher(std::string path, LimitRegistry& registry,
                                     absl::Duration interval, ReloadObserver observer)
    : path_(std::move(path)),
      registry_(registry),
      observer_(std::move(observer)),
      poller_(interval, [this] { ReloadIfChanged().IgnoreError(); }) {}

LimitsFileWatcher::~LimitsFileWatcher() { Stop(); }

absl::Status LimitsFileWatcher::Load() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read limits file ", path_));
  std::stringstream buf;
  buf << in.rdbuf();
  last_bytes_ = buf.str();
  loaded_once_ = true;
  absl::StatusOr<LimitSet> parsed = ParseLimitsYaml(last_bytes_, path_);
  if (!parsed.ok()) return parsed.status();
  const size_t n = parsed->limits.size();
  registry_.Replace(std::make_shared<const LimitSet>(*std::move(parsed)));
  if (n == 0) {
    Log(LogLevel::kWarning, "no limits defined: every request needs an inline config",
        {{"file", path_}});
  } else {
    Log(LogLevel::kInfo, "limits loaded", {{"file", path_}, {"limits", std::to_string(n)}});
  }
  return absl::OkStatus();
}

absl::Status LimitsFileWatcher::ReloadIfChanged() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    // Keep the definitions in force, and say so once per disappearance: a file replaced in
    // place (not by rename) is missing for a moment, a deleted one stays missing.
    if (!missing_) {
      Log(LogLevel::kWarning,
          "limits file missing; keeping the previous definitions (replace the file atomically, "
          "by rename)",
          {{"file", path_}});
    }
    missing_ = true;
    return absl::OkStatus();
  }
  missing_ = false;
  std::stringstream buf;
  buf << in.rdbuf();
  if (loaded_once_ && buf.str() == last_bytes_) return absl::OkStatus();
  absl::Status s = Load();
  if (!s.ok()) {
    Log(LogLevel::kError, "limits reload failed; keeping the previous definitions",
        {{"file", path_}, {"error", std::string(s.message())}});
  }
  if (observer_) observer_(s);
  return s;
}

void LimitsFileWatcher::Start() { poller_.Start(); }

void LimitsFileWatcher::Stop() { poller_.Stop(); }

}  // namespace ratelimit
