# Redis primary failover under load through a real server (async replication measured; WAIT), and
# the client's WAIT against a real primary and replica.
ratelimit_test(redis_failover_test redis_failover_test.cc
  LIBS ratelimit_storage_redis_cluster ratelimit_client ratelimit_server PkgConfig::HTTPLIB)
add_dependencies(redis_failover_test ratelimit-server)
