# One test file per unit that had none: the v1 conversions and the C++ client library with the
# command-line tool's output.
ratelimit_test(convert_test convert_test.cc LIBS ratelimit_server)
ratelimit_test(client_test client_test.cc LIBS ratelimit_server ratelimit_client)
