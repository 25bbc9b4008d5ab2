#ifndef RATELIMIT_TESTS_SUPPORT_JSON_NUMBER_H_
#define RATELIMIT_TESTS_SUPPORT_JSON_NUMBER_H_

// Reads one number from the one-line JSON the benchmark tools print, for their tests.

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ratelimit::testing {

// The first `"name": <number>` after `"section": {` (or from the start when `section` is empty),
// or -1 when there is none.
inline double JsonNumber(const std::string& json, const std::string& section,
                         const std::string& name) {
  std::string text = json;
  if (!section.empty()) {
    const size_t at = json.find(absl::StrCat("\"", section, "\": {"));
    if (at == std::string::npos) return -1;
    text = json.substr(at);
  }
  const std::string key = absl::StrCat("\"", name, "\": ");
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  const size_t begin = at + key.size();
  const size_t end = text.find_first_of(",}", begin);
  double d = -1;
  return absl::SimpleAtod(text.substr(begin, end - begin), &d) ? d : -1;
}

}  // namespace ratelimit::testing

#endif  // RATELIMIT_TESTS_SUPPORT_JSON_NUMBER_H_
