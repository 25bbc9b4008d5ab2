# The deployment examples: deploy/kubernetes (rendered by kubectl kustomize and checked),
# hot reload of a limits file mounted as Kubernetes mounts a ConfigMap (the real server and CLI),
# and deploy/compose. Script tests: tests/deploy/*.py.
find_program(DEPLOY_PYTHON3 python3 HINTS /usr/bin REQUIRED)  # Debian python3-yaml lives there
find_program(KUBECTL kubectl REQUIRED)
find_program(PROMTOOL promtool REQUIRED)
set(DEPLOY_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/deploy)

foreach(overlay rocksdb redis)
  add_test(NAME deploy.KubernetesOverlay_${overlay}
           COMMAND ${DEPLOY_PYTHON3} ${DEPLOY_TESTS}/check_kubernetes.py ${KUBECTL}
                   ${PROJECT_SOURCE_DIR}/deploy/kubernetes/overlays/${overlay} ${overlay})
endforeach()

add_test(NAME deploy.LimitsReloadThroughConfigMapSymlinkSwap
         COMMAND ${DEPLOY_PYTHON3} ${DEPLOY_TESTS}/configmap_reload_test.py
                 $<TARGET_FILE:ratelimit-server> $<TARGET_FILE:ratelimit>)

add_test(NAME deploy.ComposeFileIsValid
         COMMAND ${DEPLOY_PYTHON3} ${DEPLOY_TESTS}/check_compose.py
                 ${PROJECT_SOURCE_DIR}/deploy/compose/compose.yaml ${PROMTOOL})

# The rocksdb overlay's container args, run by the real server (ports 0, paths in a temp dir).
find_program(DEPLOY_OPENSSL openssl REQUIRED)
add_test(NAME deploy.KubernetesArgsStartTheServer
         COMMAND ${DEPLOY_PYTHON3} ${DEPLOY_TESTS}/kubernetes_args_test.py ${KUBECTL}
                 ${PROJECT_SOURCE_DIR}/deploy/kubernetes/overlays/rocksdb
                 $<TARGET_FILE:ratelimit-server> $<TARGET_FILE:ratelimit> ${DEPLOY_OPENSSL})

# scripts/container-test.sh builds Debian from the mirror and proxy of this machine's apt.
add_test(NAME deploy.AptSourcesNameTheMachinesMirrorAndProxy
         COMMAND ${DEPLOY_PYTHON3} ${DEPLOY_TESTS}/apt_sources_test.py ${PROJECT_SOURCE_DIR})
