#include "cmdline/help.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"

namespace ratelimit {

void WriteHelp(std::ostream& out, absl::string_view flags_file) {
  out << absl::ProgramUsageMessage() << "\n\nFlags:\n";
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), flags_file)) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  for (const absl::CommandLineFlag* flag : flags) {
    out << "  --" << flag->Name() << "=" << flag->DefaultValue() << "\n      " << flag->Help()
        << "\n";
  }
}

void HandleHelp(int argc, char** argv, absl::string_view flags_file) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return;
    if (arg == "--help" || arg == "-help" || arg == "--helpfull" || arg == "-helpfull" ||
        arg == "--helpshort" || arg == "-helpshort" || arg == "-h") {
      WriteHelp(std::cout, flags_file);
      std::cout.flush();
      std::exit(0);
    }
  }
}

}  // namespace ratelimit
