# The small file helpers shared by every layer (storage/file_util, storage/admin_token).
ratelimit_test(file_util_test file_util_test.cc)
ratelimit_test(admin_token_test admin_token_test.cc)
add_dependencies(admin_token_test ratelimit)
