#!/usr/bin/env bash
# A private Docker engine for the Compose test (test/ops/docker-compose.test.ts), on a Debian machine as root:
#   1. installs docker.io, docker-compose and debootstrap from Debian's packages when missing;
#   2. starts its own dockerd: socket, pidfile and exec root under $RUN_DIR, data root under $CACHE_DIR (kept between
#      runs, so images and build layers are cached); no iptables/NAT, no IP forwarding, no default bridge: containers
#      reach only their Compose network, and the host only through ports published on 127.0.0.1;
#   3. builds the local base images once per machine (base/build.sh; no image registry is reachable here);
#   4. prints one line `READY KEY=VALUE…` (DOCKER_HOST, DOCKER_BIN, COMPOSE_BIN, NODE_IMAGE, REDIS_IMAGE, …) on stdout,
#   5. then, without arguments, keeps the engine until its stdin closes (the test holds it open, so the engine stops
#      when the test ends or dies), or with a command, runs it with that environment
#      (`bash test/docker/engine.sh bash` gives a shell on the engine), and stops dockerd by its pid.
# One run at a time per machine (flock on $CACHE_DIR/lock); a dockerd left by a killed run is stopped first.
# Exit 3 means Docker cannot run on this machine at all (not Linux, not root, or no apt-get to install it); any other
# failure is an error.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR=${TOOLRUNNER_DOCKER_CACHE:-/var/cache/toolrunner-docker}
RUN_DIR=${TOOLRUNNER_DOCKER_RUN:-/run/toolrunner-docker}
# The Compose network's bridge name (docker-compose.test.yml); only used for the forwarding guard below.
BRIDGE=trs-compose0
export DEBIAN_FRONTEND=noninteractive
log() { printf '[docker-engine %s] %s\n' "$(date -u +%T)" "$*" >&2; }
cannot() {
  log "DOCKER CANNOT RUN HERE: $*"
  exit 3
}

[ "$(uname -s)" = Linux ] || cannot "not Linux"
[ "$(id -u)" = 0 ] || cannot "not root (dockerd and debootstrap need root)"

# --- 1. packages ---------------------------------------------------------------------------------------------
packages=()
[ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ] || packages+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || packages+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || packages+=(debootstrap)
if [ "${#packages[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || cannot "no apt-get to install ${packages[*]}"
  log "apt-get install ${packages[*]}"
  apt-get -o DPkg::Lock::Timeout=300 update >/dev/null
  # Keep the packages' scripts from starting the system's own docker/containerd services.
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  rc=0
  apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${packages[@]}" >/dev/null || rc=$?
  [ "$created_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || {
    log "apt-get install failed (exit $rc)"
    exit "$rc"
  }
fi
DOCKER_BIN=/usr/bin/docker
COMPOSE_BIN=$(command -v docker-compose)

# --- 2. the engine -----------------------------------------------------------------------------------------------
mkdir -p "$CACHE_DIR" "$RUN_DIR"
exec 9>"$CACHE_DIR/lock"
if ! flock -n 9; then
  log "another run holds $CACHE_DIR/lock; waiting (up to ${TOOLRUNNER_DOCKER_LOCK_WAIT:-1200} s)"
  flock -w "${TOOLRUNNER_DOCKER_LOCK_WAIT:-1200}" 9 || {
    log "gave up waiting for $CACHE_DIR/lock"
    exit 1
  }
fi

pidfile="$RUN_DIR/docker.pid"
socket="$RUN_DIR/docker.sock"
exec_root="$RUN_DIR/exec"
export DOCKER_HOST="unix://$socket"

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
# Sends TERM to a pid if it is still the named program, waits up to $3 seconds for it to go, then KILLs it.
stop_pid() {
  local pid=$1 name=$2 wait_s=$3
  alive "$pid" || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$name" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((wait_s * 10))); do
    alive "$pid" || return 0
    sleep 0.1
  done
  log "$name ($pid) did not stop in ${wait_s}s: KILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# A dockerd (and its containerd) left by a run that was killed: we hold the lock, so nobody uses them.
if [ -s "$pidfile" ]; then
  stale=$(cat "$pidfile")
  if alive "$stale"; then
    log "stopping a dockerd left by an earlier run (pid $stale)"
    stop_pid "$stale" dockerd 60
  fi
  rm -f "$pidfile"
fi
if [ -s "$exec_root/containerd/containerd.pid" ]; then
  stop_pid "$(cat "$exec_root/containerd/containerd.pid")" containerd 20
fi
rm -f "$socket"

# Containers must not reach beyond their network. dockerd below neither enables forwarding nor masquerades; if this
# host forwards anyway (another engine, a router), drop whatever would be forwarded from or to the test's bridge.
if [ "$(cat /proc/sys/net/ipv4/ip_forward 2>/dev/null || echo 0)" != 0 ]; then
  log "net.ipv4.ip_forward is on: dropping forwarded traffic of bridge $BRIDGE"
  for dir in -i -o; do
    iptables -C FORWARD "$dir" "$BRIDGE" -j DROP 2>/dev/null || iptables -I FORWARD "$dir" "$BRIDGE" -j DROP
  done
fi

echo '{}' >"$RUN_DIR/daemon.json"
log "starting dockerd (data root $CACHE_DIR/data-root, socket $socket)"
dockerd_started=$(date +%s%N)
/usr/sbin/dockerd \
  --config-file "$RUN_DIR/daemon.json" \
  --host "$DOCKER_HOST" \
  --pidfile "$pidfile" \
  --data-root "$CACHE_DIR/data-root" \
  --exec-root "$exec_root" \
  --containerd-namespace toolrunner \
  --containerd-plugins-namespace toolrunner-plugins \
  --exec-opt native.cgroupdriver=cgroupfs \
  --bridge none \
  --iptables=false \
  --ip-forward=false \
  --ip-masq=false \
  --userland-proxy=true \
  --log-level warn \
  </dev/null >"$CACHE_DIR/dockerd.log" 2>&1 9>&- &
# dockerd (and the containerd it starts) must not inherit the lock's fd 9: a run killed with SIGKILL leaves them
# running, and holding the lock they would make every later run wait for it and give up (seen: a killed run's dockerd
# held it 25 minutes); without it the next run takes the lock and stops them by their pidfiles, above.
dockerd_pid=$!

stop_engine() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if alive "${dockerd_pid:-}"; then
    log "stopping dockerd (pid $dockerd_pid)"
    stop_pid "$dockerd_pid" dockerd 60
    wait "$dockerd_pid" 2>/dev/null || true
  fi
  exit "$rc"
}
trap stop_engine EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

for _ in $(seq 600); do
  "$DOCKER_BIN" version >/dev/null 2>&1 && break
  if ! alive "$dockerd_pid"; then
    log "dockerd exited; the end of $CACHE_DIR/dockerd.log:"
    tail -n 30 "$CACHE_DIR/dockerd.log" >&2
    exit 1
  fi
  sleep 0.1
done
"$DOCKER_BIN" version >/dev/null || {
  log "dockerd did not answer within 60 s"
  tail -n 30 "$CACHE_DIR/dockerd.log" >&2
  exit 1
}
storage=$("$DOCKER_BIN" info --format '{{.Driver}}')
log "dockerd $("$DOCKER_BIN" version --format '{{.Server.Version}}') up in $((($(date +%s%N) - dockerd_started) / 1000000)) ms (storage $storage)"

# --- 3. base images ------------------------------------------------------------------------------------------------
base_started=$(date +%s)
base_env=$(CACHE_DIR="$CACHE_DIR" DOCKER_BIN="$DOCKER_BIN" bash "$here/base/build.sh")
eval "$base_env"
log "base images ready in $(($(date +%s) - base_started)) s"
# Untagged images older than 3 days: earlier builds of the app image. Not younger ones: the classic builder's
# untagged images of the build and deps stages are the layer cache of the next build (npm ci).
"$DOCKER_BIN" image prune -f --filter until=72h >/dev/null 2>&1 || true

# --- 4/5. ready ------------------------------------------------------------------------------------------------------
echo "READY DOCKER_HOST=$DOCKER_HOST DOCKER_BIN=$DOCKER_BIN COMPOSE_BIN=$COMPOSE_BIN NODE_IMAGE=$NODE_IMAGE REDIS_IMAGE=$REDIS_IMAGE PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE HAPROXY_IMAGE=$HAPROXY_IMAGE BRIDGE=$BRIDGE STORAGE=$storage"
export NODE_IMAGE REDIS_IMAGE PROMETHEUS_IMAGE HAPROXY_IMAGE DOCKER_BIN COMPOSE_BIN
if [ "$#" -gt 0 ]; then
  "$@"
else
  while IFS= read -r line; do
    [ "$line" != stop ] || break
  done
fi
