# One test file per unit that had none: the v1 conversions and the C++ client library with the
# command-line tool's output.
ratelimit_test(convert_test convert_test.cc LIBS ratelimit_server)
ratelimit_test(client_test client_test.cc LIBS ratelimit_server ratelimit_client)
# The command-line tool's input and error handling (client/cpp/cli_util.h, FormatJsonError).
ratelimit_test(cli_util_test cli_util_test.cc LIBS ratelimit_cli_util ratelimit_client)
