# State namespaces per source of limits, the v1 -> v2 store upgrade, and the algebra's
# arithmetic at the edges of its ranges.
ratelimit_test(algebra_magnitude_test algebra_magnitude_test.cc)
