#ifndef RATELIMIT_CMDLINE_HELP_H_
#define RATELIMIT_CMDLINE_HELP_H_

// --help for the project's programs (ratelimit-server, the ratelimit CLI). absl's own handling
// prints the help and exits with status 1, as if asking for help were an error; a program that
// calls HandleHelp before absl::ParseCommandLine answers --help with its usage and flags on
// standard output and exit status 0.

#include <ostream>

#include "absl/strings/string_view.h"

namespace ratelimit {

// Writes the program usage message (absl::ProgramUsageMessage) and every flag defined in a file
// whose path ends in `flags_file`, sorted by name, each as
//   --name=<default>  help text
// (one flag per paragraph, the help indented below it).
void WriteHelp(std::ostream& out, absl::string_view flags_file);

// When argv holds --help, -help, --helpfull, --helpshort or -h before any "--", writes the help
// to standard output and exits 0. Otherwise returns.
void HandleHelp(int argc, char** argv, absl::string_view flags_file);

}  // namespace ratelimit

#endif  // RATELIMIT_CMDLINE_HELP_H_
