# The Batch RPC: many independent decisions in one call.
ratelimit_test(limiter_batch_test limiter_batch_test.cc)
ratelimit_test(batch_test batch_test.cc LIBS ratelimit_server ratelimit_client PkgConfig::HTTPLIB)
add_dependencies(batch_test ratelimit-server)
