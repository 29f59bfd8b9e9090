#!/usr/bin/env bash
# What the test suite needs besides node_modules, from Debian's packages: redis-server (the tests start private
# servers), redis-cli (test clusters), Chromium (browser tests via playwright-core), python3-httpx (the Python
# client's tests) and docker-compose (validates docker-compose.yml without an engine; test/docker/engine.sh installs docker.io and debootstrap itself for the Compose
# test on a real engine). Runs before `npm test` (the `pretest` script): installs what is missing
# when it can (root with apt-get), otherwise says what to install and fails.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
log() { printf '==> %s\n' "$*"; }

packages=()
# redis-server for the tests' private servers and the embedded mode; redis-cli (redis-tools) to create test clusters.
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ] && [ ! -x /usr/local/bin/redis-server ]; then
  packages+=(redis-server redis-tools)
elif ! command -v redis-cli >/dev/null 2>&1; then
  packages+=(redis-tools)
fi
# Browser tests drive Debian's Chromium with playwright-core (executablePath /usr/bin/chromium).
if [ ! -x /usr/bin/chromium ]; then
  packages+=(chromium)
fi
# test/ops/docker.test.ts validates docker-compose.yml with `docker-compose config` (client-side, no engine needed).
if ! command -v docker-compose >/dev/null 2>&1; then
  packages+=(docker-compose)
fi

# The Python client's tests (test/clients/python-client.test.ts) run on Debian's python3 with its httpx.
if [ ! -x /usr/bin/python3 ] || ! /usr/bin/python3 -c 'import httpx' >/dev/null 2>&1; then
  packages+=(python3 python3-httpx)
fi

if [ "${#packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "The tests need: ${packages[*]} (Debian/Ubuntu package names). Install them, or run as root on Debian to let this script do it." >&2
    exit 1
  fi
  log "apt-get update"
  apt-get -o DPkg::Lock::Timeout=300 update
  # (DPkg::Lock::Timeout: another apt-get on the machine, e.g. a second test run, is waited for, not failed.)
  # Keep package scripts from starting services (a second Redis on 6379, say) while installing.
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  log "apt-get install ${packages[*]}"
  install_rc=0
  apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${packages[@]}" || install_rc=$?
  if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  if [ "$install_rc" -ne 0 ]; then
    echo "apt-get install failed (exit $install_rc)" >&2
    exit "$install_rc"
  fi
else
  log "system packages present: redis-server, redis-cli, /usr/bin/chromium, docker-compose, python3-httpx"
fi

log "redis-server: $(redis-server --version)"
log "docker-compose: $(docker-compose version --short 2>/dev/null || docker-compose --version)"

