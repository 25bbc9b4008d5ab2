// The limits YAML: every field, defaults, and errors that name the file, line and field.
#include "server/v1/limits_file.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "server/v1/limit_registry.h"
#include "tests/support/test_support.h"

namespace ratelimit {
namespace {

using ::ratelimit::testing::TempDir;
using ::ratelimit::testing::WriteFileAtomically;

TEST(LimitsFileTest, ParsesEveryField) {
  auto set = ParseLimitsYaml(R"(limits:
  - name: a
    kind: token_bucket
    rate: 2.5
    period: 1500ms
    capacity: 7
    max_reserved: 0
    jitter: 0.25
  - name: b
    kind: fixed_window
    rate: 100
    period: 1d
    start: 2h
)",
                             "f.yaml");
  ASSERT_OK(set);
  const LimitConfig* a = set->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->kind, LimitKind::kTokenBucket);
  EXPECT_DOUBLE_EQ(a->rate, 2.5);
  EXPECT_EQ(a->period_us, 1500000);
  EXPECT_EQ(a->capacity, 7);
  EXPECT_EQ(a->max_reserved, 0);
  EXPECT_DOUBLE_EQ(a->jitter, 0.25);
  EXPECT_FALSE(a->start_us.has_value());
  const LimitConfig* b = set->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->kind, LimitKind::kFixedWindow);
  EXPECT_EQ(b->period_us, 86400LL * 1000000);
  EXPECT_EQ(b->start_us, 7200LL * 1000000);
  EXPECT_FALSE(b->capacity.has_value());
  EXPECT_DOUBLE_EQ(b->EffectiveCapacity(), 100);
  EXPECT_EQ(set->Find("c"), nullptr);
}

TEST(LimitsFileTest, EmptyDocumentsDefineNothing) {
  for (const char* doc : {"", "limits:", "limits: []"}) {
    auto set = ParseLimitsYaml(doc, "f.yaml");
    ASSERT_OK(set);
    EXPECT_TRUE(set->limits.empty()) << doc;
  }
}

TEST(LimitsFileTest, ErrorsNameFileLineAndField) {
  struct Case {
    const char* yaml;
    const char* error;
  };
  const Case cases[] = {
      {"limits:\n  - name: a\n    kind: token_bucket\n    rate: 0\n    period: 1s\n",
       "f.yaml:4:11: limits[0].rate: must be > 0"},
      // A value the entry's other fields make wrong is at its own line, not the entry's.
      {"limits:\n  - name: a\n    kind: token_bucket\n    rate: 1\n    period: 1s\n"
       "    capacity: -5\n",
       "f.yaml:6:15: limits[0].capacity: must be >= 0"},
      {"limits:\n  - name: a\n    kind: leaky\n", "f.yaml:3:11: limits[0].kind: must be"},
      {"limits:\n  - name: a\n    kind: token_bucket\n    rate: x\n",
       "f.yaml:4:11: limits[0].rate: must be a number"},
      {"limits:\n  - name: a\n    kind: token_bucket\n    rate: 1\n    period: 10\n",
       "f.yaml:5:13: limits[0].period: not a duration"},
      {"limits:\n  - name: a\n    kind: token_bucket\n    rate: 1\n",
       "f.yaml:2:5: limits[0].period: required"},
      {"limits:\n  - kind: token_bucket\n    rate: 1\n    period: 1s\n",
       "f.yaml:2:5: limits[0].name: must not be empty"},
      {"limits:\n  - name: a\n    rate: 1\n    period: 1s\n    burst: 3\n",
       "f.yaml:5:5: limits[0]: unknown key \"burst\""},
      {"limit:\n  - name: a\n", "f.yaml:1:1: unknown key \"limit\""},
      {"limits:\n  - name: a\n    kind: token_bucket\n    rate: 1\n    period: 1s\n"
       "  - name: a\n    kind: token_bucket\n    rate: 1\n    period: 1s\n",
       "f.yaml:6:5: limits[1].name: \"a\" is defined twice"},
      {"limits:\n  - name: a\n    kind: token_bucket\n    rate: 1\n    period: 1s\n    start: 0s\n",
       "f.yaml:6:12: limits[0].start: only applies to fixed windows"},
      {"limits: [\n", "f.yaml:2:1"},
      // 0 is no TTL (a config keeps 0 for "not given": it must not read as the default).
      {"limits:\n  - name: a\n    kind: concurrency\n    capacity: 5\n    lease_ttl: 0s\n",
       "f.yaml:5:16: limits[0].lease_ttl: must be at least 1ms"},
      {"limits:\n  - name: a\n    kind: concurrency\n    capacity: 5\n    max_lease_ttl: 0s\n",
       "f.yaml:5:20: limits[0].max_lease_ttl: must be at least 1ms"},
  };
  for (const Case& c : cases) {
    auto set = ParseLimitsYaml(c.yaml, "f.yaml");
    ASSERT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_EQ(set.status().message().substr(0, strlen(c.error)), c.error) << set.status();
  }
}

TEST(LimitsFileTest, ReadsAndLoadsAFileOrSaysWhichCannotBeRead) {
  TempDir dir;
  WriteFileAtomically(dir.File("l.yaml"),
                      "limits:\n  - {name: a, kind: token_bucket, rate: 1, "
                      "period: 1s}\n");
  absl::StatusOr<std::string> bytes = ReadLimitsFile(dir.File("l.yaml"));
  ASSERT_OK(bytes);
  EXPECT_EQ(bytes->substr(0, 7), "limits:");
  absl::StatusOr<LimitSet> set = LoadLimitsFile(dir.File("l.yaml"));
  ASSERT_OK(set);
  EXPECT_NE(set->Find("a"), nullptr);
  for (const absl::Status& missing : {ReadLimitsFile(dir.File("none.yaml")).status(),
                                      LoadLimitsFile(dir.File("none.yaml")).status()}) {
    EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(missing.message(), "cannot read limits file " + dir.File("none.yaml"));
  }
}

// A directory given as the limits file is refused (it read as a file defining no limits: the
// server started with none, and a reload dropped every limit).
TEST(LimitsFileTest, ADirectoryIsRefusedNotReadAsNoLimits) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("limits.d"));
  for (const absl::Status& s : {ReadLimitsFile(dir.File("limits.d")).status(),
                                LoadLimitsFile(dir.File("limits.d")).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ(s.message(), "limits file: " + dir.File("limits.d") + " is a directory, not a file");
  }
}

TEST(LimitsFileWatcherTest, ReloadsChangedFilesAndKeepsTheOldOnErrors) {
  TempDir dir;
  const std::string path = dir.File("limits.yaml");
  WriteFileAtomically(path, "limits:\n  - {name: a, kind: token_bucket, rate: 1, period: 1s}\n");
  LimitRegistry registry;
  std::vector<absl::Status> outcomes;
  LimitsFileWatcher watcher(path, registry, absl::Seconds(1),
                            [&](const absl::Status& s) { outcomes.push_back(s); });
  ASSERT_OK(watcher.Load());
  EXPECT_NE(registry.Current()->Find("a"), nullptr);
  ASSERT_OK(watcher.ReloadIfChanged());  // unchanged: nothing happens
  EXPECT_TRUE(outcomes.empty());

  WriteFileAtomically(path, "limits:\n  - {name: b, kind: token_bucket, rate: 1, period: 1s}\n");
  ASSERT_OK(watcher.ReloadIfChanged());
  EXPECT_EQ(registry.Current()->Find("a"), nullptr);
  EXPECT_NE(registry.Current()->Find("b"), nullptr);

  WriteFileAtomically(path, "limits:\n  - {name: c, kind: token_bucket, rate: -1, period: 1s}\n");
  EXPECT_EQ(watcher.ReloadIfChanged().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(registry.Current()->Find("b"), nullptr);
  EXPECT_EQ(registry.Current()->Find("c"), nullptr);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_TRUE(outcomes[0].ok());
  EXPECT_FALSE(outcomes[1].ok());
}

}  // namespace
}  // namespace ratelimit
