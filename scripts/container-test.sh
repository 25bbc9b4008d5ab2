#!/usr/bin/env bash
# Builds the container image (deploy/container/Dockerfile) with podman and checks it end to end:
# the CLI consumes through a published port, the container stops gracefully on SIGTERM, a new
# container on the same volume sees the state, the server runs as non-root, the healthcheck
# turns healthy. Prints the image size. Exits non-zero, naming the check, on any failure.
#
# No registry is needed: when debian:bookworm-slim is missing it is made with debootstrap from the
# Debian mirror this machine's apt uses, through apt's HTTP proxy if it has one
# (scripts/apt_sources.py), and tagged debian:bookworm for the build stage. Needs root (apt,
# debootstrap, rootful podman).
#
# Environment:
#   RATELIMIT_IMAGE         image tag to build and test (default ratelimit-server:latest)
#   RATELIMIT_IMAGE_JOBS    compile jobs inside the build (default: the number of CPUs)
#   RATELIMIT_REMOVE_IMAGE  1: remove the image at the end (default 0: keep it, and its build
#                           cache, so the next run is quick)
#   RATELIMIT_IMAGE_NO_CACHE 1: build every layer anew (podman build --no-cache), as on a
#                           machine that never built the image
#   CCACHE_DIR              a compiler cache (ccache) for the build stage, mounted at /ccache:
#                           the build stage compiles with the release build's flags, so the
#                           objects a release build left there (scripts/test.sh) are reused.
#                           Unset: no cache, everything is compiled in the image.
#   RATELIMIT_DEBIAN_MIRROR Debian mirror for debootstrap and the image's apt (default: the one
#                           this machine's apt sources name for bookworm main)
set -euo pipefail
cd "$(dirname "$0")/.."

image="${RATELIMIT_IMAGE:-ratelimit-server:latest}"
jobs="${RATELIMIT_IMAGE_JOBS:-$(nproc)}"
start_time=$(date +%s)

fail() {
  echo "container-test: FAILED: $*" >&2
  exit 1
}
step() { echo "container-test: $*"; }

# ---- tools ----
packages=(podman buildah runc uidmap fuse-overlayfs debootstrap python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# ---- where Debian comes from: this machine's apt sources and proxy ----
apt_sources=$(scripts/apt_sources.py) || fail "no Debian mirror in this machine's apt sources"
source_of() { awk -v k="$1" '$1 == k { print $2 }' <<<"$apt_sources"; }
mirror="${RATELIMIT_DEBIAN_MIRROR:-$(source_of mirror)}"
security_mirror="$(source_of security)"
[ -n "$security_mirror" ] || security_mirror="${mirror%/debian}/debian-security"
apt_proxy="$(source_of proxy)"
proxy_args=()
if [ -n "$apt_proxy" ]; then
  export http_proxy="${http_proxy:-$apt_proxy}"  # debootstrap's downloads
  proxy_args=(--build-arg "http_proxy=$http_proxy")  # the image build's apt-get
fi

work=$(mktemp -d /tmp/ratelimit-container-test.XXXXXX)
# podman on these machines: no rlimit changes (not permitted), runc (crun fails on hybrid
# cgroups).
cat >"$work/containers.conf" <<'CONF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$work/containers.conf"

suffix="$$-$(date +%s)"
volume="ratelimit-test-data-$suffix"
containers=()
cleanup() {
  local status=$?
  for c in "${containers[@]}"; do
    if [ "$status" -ne 0 ]; then
      echo "---- logs of $c ----" >&2
      podman logs "$c" >&2 2>&1 || true
    fi
    podman rm -f -t 0 "$c" >/dev/null 2>&1 || true
  done
  podman volume rm -f "$volume" >/dev/null 2>&1 || true
  if [ "${RATELIMIT_REMOVE_IMAGE:-0}" = 1 ]; then podman rmi -f "$image" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

# ---- base images ----
if ! podman image exists debian:bookworm-slim; then
  step "making debian:bookworm-slim with debootstrap from $mirror"
  rootfs="$work/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
  # As Debian's official image: the updates and security suites, and no documentation.
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/excludes" <<'EXCLUDES'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EXCLUDES
  find "$rootfs/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete 2>/dev/null || true
  find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  tar -C "$rootfs" -c . | podman import --quiet --change 'CMD ["bash"]' - debian:bookworm-slim >/dev/null
  rm -rf "$rootfs"
fi
podman image exists debian:bookworm || podman tag debian:bookworm-slim debian:bookworm

# ---- build ----
build_args=()
[ "${RATELIMIT_IMAGE_NO_CACHE:-0}" = 1 ] && build_args+=(--no-cache)
# The compiler cache, and its counters before the build (ccache --print-stats: "name<TAB>value"
# lines) so that the build's hits and misses can be shown.
cache_stat() { awk -v k="$1" '$1 == k { print $2 }' <<<"$2"; }
stats_before=""
if [ -n "${CCACHE_DIR:-}" ]; then
  mkdir -p "$CCACHE_DIR"
  build_args+=(-v "$CCACHE_DIR:/ccache")
  if command -v ccache >/dev/null; then stats_before=$(ccache --print-stats); fi
  step "building $image (podman, $jobs compile jobs, compiler cache $CCACHE_DIR)"
else
  step "building $image (podman, $jobs compile jobs, no compiler cache)"
fi
build_start=$(date +%s)
podman build --format docker --network=host --pull=never --build-arg "JOBS=$jobs" \
  "${proxy_args[@]}" "${build_args[@]}" \
  -f deploy/container/Dockerfile -t "$image" . >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log" >&2; fail "podman build (log above)"; }
build_seconds=$(( $(date +%s) - build_start ))
size_bytes=$(podman image inspect --format '{{.Size}}' "$image")
size_mb=$(( size_bytes / 1000000 ))
step "built in ${build_seconds}s; image size ${size_mb} MB"
if [ -n "$stats_before" ]; then
  stats_after=$(ccache --print-stats)
  delta() { echo $(( $(cache_stat "$1" "$stats_after") - $(cache_stat "$1" "$stats_before") )); }
  hits=$(( $(delta direct_cache_hit) + $(delta preprocessed_cache_hit) ))
  step "compiler cache: $hits hits, $(delta cache_miss) misses"
fi

[ "$(podman image inspect --format '{{.Config.User}}' "$image")" = "65532:65532" ] ||
  fail "the image's user is not 65532:65532"
case "$(podman image inspect --format '{{.Config.Healthcheck}}' "$image")" in
  *ratelimit*) ;;
  *) fail "the image has no healthcheck (build with --format docker)" ;;
esac
[ "$(podman image inspect --format '{{.Config.StopSignal}}' "$image")" = "SIGTERM" ] ||
  fail "the image's stop signal is not SIGTERM"

# ---- run ----
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
podman volume create "$volume" >/dev/null

start_container() {  # NAME [RUN-OPTIONS...]: the image on the volume, 8081 published on $port
  local name=$1
  shift
  containers+=("$name")
  # podman's stderr goes to a file (without systemd it complains that it cannot schedule the
  # healthcheck timer; the healthcheck is run by hand below); shown on failure.
  podman run -d --name "$name" "$@" -v "$volume:/data" -p "127.0.0.1:$port:8081" "$image" \
    >/dev/null 2>>"$work/podman.err" || { cat "$work/podman.err" >&2; fail "podman run $name"; }
}

# The CLI: the host's build when there is one, else the one in the image.
cli_container=""
cli() {  # ratelimit CLI arguments...; prints its output, returns its exit status
  if [ -x build/bin/ratelimit ]; then
    build/bin/ratelimit --target="127.0.0.1:$port" "$@"
  else
    podman exec "$cli_container" /usr/local/bin/ratelimit --target=127.0.0.1:8081 "$@"
  fi
}
if [ -x build/bin/ratelimit ]; then
  step "CLI: build/bin/ratelimit on the host, through 127.0.0.1:$port"
else
  step "CLI: no build/bin/ratelimit on the host; the image's CLI through podman exec"
fi

wait_ready() {  # NAME: until the server answers a Check (60 s at most)
  cli_container="$1"
  local deadline=$(( $(date +%s) + 60 ))
  until cli check --name=failed_logins --key=readiness >/dev/null 2>&1; do
    [ "$(podman inspect --format '{{.State.Running}}' "$1")" = true ] ||
      fail "container $1 exited during start-up"
    [ "$(date +%s)" -lt "$deadline" ] || fail "container $1 did not answer within 60 s"
    sleep 1
  done
}

expect_status() {  # WANT DESCRIPTION CLI-ARGS...: the CLI's exit status must be WANT
  local want=$1 what=$2 got=0
  shift 2
  cli "$@" >"$work/cli.out" 2>&1 || got=$?
  [ "$got" -eq "$want" ] || { cat "$work/cli.out" >&2; fail "$what: exit status $got, expected $want"; }
}

first="ratelimit-test-1-$suffix"
start_container "$first"
wait_ready "$first"
step "container $first answers"

# failed_logins (deploy/limits.example.yaml): 5 per hour, one token back every 12 minutes.
key="container-test"
for i in 1 2 3; do
  expect_status 0 "consume $i of failed_logins/$key" consume --name=failed_logins --key="$key"
done
expect_status 0 "check of 2 tokens (2 left)" check --name=failed_logins --key="$key" --count=2
expect_status 2 "check of 3 tokens (2 left)" check --name=failed_logins --key="$key" --count=3
step "consumed 3 of 5 tokens through the CLI"

# Graceful stop: SIGTERM, then the server drains, closes RocksDB and exits 0 well within podman's
# timeout (30 s; after it podman would SIGKILL and the exit code would be 137).
stop_start=$(date +%s)
podman stop -t 30 "$first" >/dev/null 2>>"$work/podman.err" || fail "podman stop $first"
stop_seconds=$(( $(date +%s) - stop_start ))
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$first")
[ "$exit_code" = 0 ] || fail "$first exited with $exit_code on SIGTERM (expected 0)"
podman logs "$first" >"$work/first.log" 2>&1
grep -q 'signal received.*SIGTERM' "$work/first.log" ||
  fail "$first: no 'signal received SIGTERM' in its log"
step "stopped by SIGTERM in ${stop_seconds}s, exit code 0"
podman rm "$first" >/dev/null 2>>"$work/podman.err"

second="ratelimit-test-2-$suffix"
# This one with a read-only root filesystem (as in deploy/kubernetes): the server writes only
# /data.
start_container "$second" --read-only
wait_ready "$second"
expect_status 2 "check of 3 tokens after the restart (state lost?)" \
  check --name=failed_logins --key="$key" --count=3
expect_status 0 "check of 2 tokens after the restart" check --name=failed_logins --key="$key" --count=2
step "a new container (read-only root) on the same volume sees the state (2 tokens left)"

# Non-root: the configured user, and the real uids of the running server process.
user=$(podman inspect --format '{{.Config.User}}' "$second")
[ "$user" = "65532:65532" ] || fail "container user is '$user'"
pid=$(podman inspect --format '{{.State.Pid}}' "$second")
uids=$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")
gids=$(awk '/^Gid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")
[ "$uids" = "65532 65532 65532 65532" ] || fail "server process uids are '$uids'"
[ "$gids" = "65532 65532 65532 65532" ] || fail "server process gids are '$gids'"
step "runs as uid/gid 65532 ($(podman top "$second" user group comm | tail -1 | tr -s ' '))"

# The healthcheck: run it (podman schedules it with systemd timers, which may be absent) until
# it passes, then the container's health status must read healthy.
deadline=$(( $(date +%s) + 60 ))
until podman healthcheck run "$second" >/dev/null 2>&1; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "the healthcheck did not pass within 60 s"
  sleep 2
done
health=$(podman inspect --format '{{.State.Health.Status}}' "$second" 2>/dev/null ||
  podman inspect --format '{{.State.Healthcheck.Status}}' "$second")
[ "$health" = healthy ] || fail "health status is '$health' after a passing healthcheck"
step "healthcheck: healthy"

podman stop -t 30 "$second" >/dev/null 2>>"$work/podman.err" || fail "podman stop $second"
[ "$(podman inspect --format '{{.State.ExitCode}}' "$second")" = 0 ] ||
  fail "$second did not exit 0 on SIGTERM"

# The healthcheck fails when the server does not answer it: a server started without the probe
# port 8082 (the main port answers, the healthcheck's target does not).
third="ratelimit-test-3-$suffix"
containers+=("$third")
podman run -d --name "$third" -v "$volume:/data" -p "127.0.0.1:$port:8081" "$image" \
  --listen=0.0.0.0:8081 --allow_insecure_listen --data_dir=/data \
  --limits_file=/etc/ratelimit/limits/limits.yaml >/dev/null 2>>"$work/podman.err" ||
  { cat "$work/podman.err" >&2; fail "podman run $third"; }
wait_ready "$third"
if podman healthcheck run "$third" >/dev/null 2>&1; then
  fail "the healthcheck passed on a server without its probe port"
fi
step "healthcheck: fails on a server without the probe port 8082"

total=$(( $(date +%s) - start_time ))
echo "container-test: PASSED in ${total}s (build ${build_seconds}s): image $image," \
  "${size_mb} MB; stop ${stop_seconds}s"
