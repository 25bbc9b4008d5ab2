# cmake -DINPUTS=<file>[,<file>...] -DOUTPUT=<file.cc> -DSYMBOL=<name> -P embed_file.cmake
# Writes a C++ source defining `absl::string_view ratelimit::<SYMBOL>()` that returns the bytes of
# the INPUTS, in order, one newline between two files, so that text files (the Redis function
# library) are compiled into the binary.
string(REPLACE "," ";" inputs "${INPUTS}")
set(hex "")
set(separator "")
foreach(input IN LISTS inputs)
  file(READ "${input}" part HEX)
  string(APPEND hex "${separator}${part}")
  set(separator "0a")
endforeach()
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUTS} by embed_file.cmake. Do not edit.\n"
  "#include \"absl/strings/string_view.h\"\n"
  "namespace ratelimit {\n"
  "namespace {\n"
  "constexpr char kBytes[] = {${bytes}};\n"
  "}  // namespace\n"
  "absl::string_view ${SYMBOL}() { return absl::string_view(kBytes, sizeof(kBytes)); }\n"
  "}  // namespace ratelimit\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
