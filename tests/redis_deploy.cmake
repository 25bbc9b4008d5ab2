# deploy/redis: the cluster scripts and redis.conf, with a real server on the cluster they start.
ratelimit_test(redis_deploy_test redis_deploy_test.cc LIBS ratelimit_client ratelimit_redis_test_support)
target_compile_definitions(redis_deploy_test PRIVATE RATELIMIT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(redis_deploy_test ratelimit-server)
