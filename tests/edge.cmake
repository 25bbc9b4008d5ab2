# The server's edge: start-up and shutdown of the endpoints, per-connection limits, an exclusive
# port, protobuf value ranges, trace context validation, the metrics cap, --help and logs.
ratelimit_test(edge_test edge_test.cc LIBS ratelimit_server ratelimit_client)
ratelimit_test(edge_server_test edge_server_test.cc LIBS ratelimit_server ratelimit_client)
ratelimit_test(edge_process_test edge_process_test.cc LIBS ratelimit_client)
add_dependencies(edge_process_test ratelimit-server ratelimit)
