// Hot reload of the Envoy configuration directory, driven by calling the watcher directly.
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/envoy/envoy_registry.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;
using ::testing::HasSubstr;

constexpr char kV1[] =
    "domain: web\ndescriptors:\n  - key: a\n"
    "    rate_limit: {unit: second, requests_per_unit: 1}\n";
constexpr char kV2[] =
    "domain: web\ndescriptors:\n  - key: a\n"
    "    rate_limit: {unit: second, requests_per_unit: 2}\n";
constexpr char kBroken[] =
    "domain: web\ndescriptors:\n  - key: a\n"
    "    rate_limit: {unit: second, requests_per_unit: 3, oops: 1}\n";

uint32_t LimitOfA(const EnvoyConfigRegistry& r) {
  const auto config = r.Current();
  const EnvoyDomain* d = config->FindDomain("web");
  if (d == nullptr || d->descriptors.nodes.empty()) return 0;
  return d->descriptors.nodes[0].limit->limits[0].requests_per_unit;
}

TEST(EnvoyRegistryTest, GoodEditAppliesBadEditKeepsPrevious) {
  TempDir dir;
  WriteFileAtomically(dir.File("web.yaml"), kV1);
  EnvoyConfigRegistry registry;
  std::vector<absl::Status> observed;
  EnvoyConfigWatcher watcher(dir.path(), registry, absl::Seconds(1),
                             [&](const absl::Status& s) { observed.push_back(s); });
  ASSERT_OK(watcher.Load());
  EXPECT_EQ(LimitOfA(registry), 1u);

  EXPECT_OK(watcher.ReloadIfChanged());  // nothing changed
  EXPECT_TRUE(observed.empty());

  WriteFileAtomically(dir.File("web.yaml"), kV2);
  EXPECT_OK(watcher.ReloadIfChanged());
  EXPECT_EQ(LimitOfA(registry), 2u);

  WriteFileAtomically(dir.File("web.yaml"), kBroken);
  absl::Status bad = watcher.ReloadIfChanged();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr(dir.File("web.yaml") + ":4:"));
  EXPECT_THAT(bad.message(), HasSubstr("unknown key \"oops\""));
  EXPECT_EQ(LimitOfA(registry), 2u);  // the previous configuration stays
  ASSERT_EQ(observed.size(), 2u);
  EXPECT_TRUE(observed[0].ok());
  EXPECT_FALSE(observed[1].ok());

  // The same broken bytes are not reported again; fixing them applies.
  EXPECT_OK(watcher.ReloadIfChanged());
  WriteFileAtomically(dir.File("web.yaml"), kV1);
  EXPECT_OK(watcher.ReloadIfChanged());
  EXPECT_EQ(LimitOfA(registry), 1u);
}

TEST(EnvoyRegistryTest, FilesAddedAndRemoved) {
  TempDir dir;
  EnvoyConfigRegistry registry;
  EnvoyConfigWatcher watcher(dir.path(), registry, absl::Seconds(1));
  ASSERT_OK(watcher.Load());  // an empty directory: no domains
  EXPECT_TRUE(registry.Current()->domains.empty());
  WriteFileAtomically(dir.File("web.yaml"), kV1);
  WriteFileAtomically(dir.File("api.yaml"), "domain: api\n");
  EXPECT_OK(watcher.ReloadIfChanged());
  EXPECT_EQ(registry.Current()->domains.size(), 2u);
  std::filesystem::remove(dir.File("api.yaml"));
  EXPECT_OK(watcher.ReloadIfChanged());
  EXPECT_EQ(registry.Current()->domains.size(), 1u);
  // A second file claiming the same domain is refused as a whole.
  WriteFileAtomically(dir.File("web2.yaml"), "domain: web\n");
  EXPECT_THAT(watcher.ReloadIfChanged().message(),
              HasSubstr("web2.yaml:1:9: domain: \"web\" is already defined at "));
  EXPECT_EQ(LimitOfA(registry), 1u);
}

TEST(EnvoyRegistryTest, StartUpFailsOnABadOrMissingDirectory) {
  TempDir dir;
  EnvoyConfigRegistry registry;
  EXPECT_EQ(EnvoyConfigWatcher(dir.File("missing"), registry, absl::Seconds(1)).Load().code(),
            absl::StatusCode::kNotFound);
  WriteFileAtomically(dir.File("web.yaml"), kBroken);
  EXPECT_EQ(EnvoyConfigWatcher(dir.path(), registry, absl::Seconds(1)).Load().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry.Current()->domains.empty());
}

// How many times `needle` occurs in `text`.
int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(EnvoyRegistryTest, MissingDirectoryDuringReloadKeepsConfiguration) {
  TempDir dir;
  const std::string sub = dir.File("conf");
  std::filesystem::create_directory(sub);
  WriteFileAtomically(sub + "/web.yaml", kV1);
  EnvoyConfigRegistry registry;
  EnvoyConfigWatcher watcher(sub, registry, absl::Seconds(1));
  ASSERT_OK(watcher.Load());
  std::filesystem::remove_all(sub);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) EXPECT_OK(watcher.ReloadIfChanged());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Occurrences(err, "WARNING envoy config directory missing"), 1) << err;  // once
  EXPECT_EQ(LimitOfA(registry), 1u);
  // Back, empty: loaded, with a warning that no request is limited any more.
  std::filesystem::create_directory(sub);
  ::testing::internal::CaptureStderr();
  EXPECT_OK(watcher.ReloadIfChanged());
  const std::string empty = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Occurrences(empty, "WARNING envoy config loaded with no domain"), 1) << empty;
}

}  // namespace
}  // namespace ratelimit
