#ifndef RATELIMIT_CMDLINE_FLAGS_CHECK_H_
#define RATELIMIT_CMDLINE_FLAGS_CHECK_H_

// A command line read as absl's flag parser reads it, before the parser runs: so that a program
// can refuse a wrong one in its own words (absl prints its own text and exits), and see which
// flags were written and which arguments are not flags at all.

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace ratelimit {

// One flag as written on a command line (ForEachFlag).
struct WrittenFlag {
  // As written, without its dashes and value (`--noverbose`: "noverbose").
  std::string name;
  // The defined flag it sets (of a negative boolean, the boolean); null when none is defined.
  absl::CommandLineFlag* flag = nullptr;
  // `--noverbose` for a boolean flag `verbose`.
  bool negated = false;
  // The value written for it: after its '=', or the next argument for a defined flag that is
  // not a boolean; unset when there is none.
  std::optional<std::string> value;
};

// Calls `fn` with each flag written on a command line, in order, up to a bare "--", read as
// absl's parser reads them: `--name=v`, `--name v` (v the value of a defined flag that is not a
// boolean, whatever it starts with: `--key -1` sets --key to "-1"), `-name`, and `--noname` for
// a boolean flag `name`. Returns the first error `fn` returns, reading no further.
absl::Status ForEachFlag(int argc, const char* const* argv,
                         absl::FunctionRef<absl::Status(const WrittenFlag&)> fn);

// The names of the flags written on a command line (ForEachFlag; a negative boolean by the
// boolean's name), up to a bare "--".
std::vector<std::string> FlagsGiven(int argc, const char* const* argv);

// What absl's flag parser would refuse on this command line, as an error the program reports
// its own way (absl prints its own text and exits, which neither the CLI's --json nor the
// server's log lines can carry): INVALID_ARGUMENT naming the first flag that is not defined,
// lacks its value, or has a value its type does not read. A flag checked holds the value given,
// as the parser would set it. OK when the parser will accept them all.
absl::Status CheckFlags(int argc, const char* const* argv);

// The arguments that are neither a flag nor a flag's value (ForEachFlag's reading), in order,
// those after a bare "--" included; argv[0] is not one.
std::vector<std::string> PositionalArguments(int argc, const char* const* argv);

}  // namespace ratelimit

#endif  // RATELIMIT_CMDLINE_FLAGS_CHECK_H_
