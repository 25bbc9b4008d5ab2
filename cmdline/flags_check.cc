#include "cmdline/flags_check.h"

#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ratelimit {
namespace {

// The one reading of a command line: each flag to `fn` (ForEachFlag's reading), each argument
// that is neither a flag nor a flag's value to `positional`, those after a bare "--" too.
absl::Status Walk(int argc, const char* const* argv,
                  absl::FunctionRef<absl::Status(const WrittenFlag&)> fn,
                  absl::FunctionRef<void(absl::string_view)> positional) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional(argv[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional(arg);
      continue;
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    WrittenFlag written;
    written.name = std::string(arg.substr(0, eq));
    written.flag = absl::FindCommandLineFlag(written.name);
    if (eq != absl::string_view::npos) written.value = std::string(arg.substr(eq + 1));
    if (written.flag == nullptr && absl::StartsWith(written.name, "no") && !written.value) {
      // --noverbose: a boolean's false (absl refuses the negative form with a value).
      absl::CommandLineFlag* positive = absl::FindCommandLineFlag(written.name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>()) {
        written.flag = positive;
        written.negated = true;
      }
    }
    if (written.flag != nullptr && !written.value && !written.flag->IsOfType<bool>() &&
        i + 1 < argc) {
      written.value = argv[++i];  // --name value: the value is the flag's, whatever it starts with
    }
    if (absl::Status s = fn(written); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ForEachFlag(int argc, const char* const* argv,
                         absl::FunctionRef<absl::Status(const WrittenFlag&)> fn) {
  return Walk(argc, argv, fn, [](absl::string_view) {});
}

std::vector<std::string> FlagsGiven(int argc, const char* const* argv) {
  std::vector<std::string> given;
  (void)ForEachFlag(argc, argv, [&given](const WrittenFlag& f) {
    given.push_back(f.negated ? std::string(f.flag->Name()) : f.name);
    return absl::OkStatus();
  });
  return given;
}

absl::Status CheckFlags(int argc, const char* const* argv) {
  return ForEachFlag(argc, argv, [](const WrittenFlag& f) {
    if (f.flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("--", f.name, ": no such flag (see --help)"));
    }
    if (f.negated) return absl::OkStatus();
    std::string value;
    if (f.value) {
      value = *f.value;
    } else if (f.flag->IsOfType<bool>()) {
      value = "true";
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", f.name, ": needs a value"));
    }
    std::string error;
    if (!f.flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", f.name, ": ", error));
    }
    return absl::OkStatus();
  });
}

std::vector<std::string> PositionalArguments(int argc, const char* const* argv) {
  std::vector<std::string> positional;
  (void)Walk(
      argc, argv, [](const WrittenFlag&) { return absl::OkStatus(); },
      [&positional](absl::string_view arg) { positional.emplace_back(arg); });
  return positional;
}

}  // namespace ratelimit
