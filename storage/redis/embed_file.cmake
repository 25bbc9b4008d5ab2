# cmake -DINPUT=<file> -DOUTPUT=<file.cc> -DSYMBOL=<name> -P embed_file.cmake
# Writes a C++ source defining `absl::string_view ratelimit::<SYMBOL>()` that returns the bytes of
# INPUT, so that a text file (the Redis function library) is compiled into the binary.
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by embed_file.cmake. Do not edit.\n"
  "#include \"absl/strings/string_view.h\"\n"
  "namespace ratelimit {\n"
  "namespace {\n"
  "constexpr char kBytes[] = {${bytes}};\n"
  "}  // namespace\n"
  "absl::string_view ${SYMBOL}() { return absl::string_view(kBytes, sizeof(kBytes)); }\n"
  "}  // namespace ratelimit\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
