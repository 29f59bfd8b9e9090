# The base image of every stage: the public node:24-bookworm-slim unless NODE_IMAGE says otherwise (the Compose test
# builds on a local stand-in, test/docker/base/). No `# syntax=` line: the builder's built-in frontend suffices, so a
# BuildKit build needs no registry for it.
ARG NODE_IMAGE=node:24-bookworm-slim

# --- build: compiles the TypeScript sources to JavaScript (dist/) and bundles the typed client for browsers
# (dist/client/browser.js, which the console loads as its API layer), with the dev dependencies ---
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY routes ./routes
COPY tools ./tools
RUN npm run build
COPY packages/client ./packages/client
RUN npm run build:client

# --- deps: production node_modules only ---
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# --- runtime ---
FROM ${NODE_IMAGE} AS runtime
WORKDIR /app
# MALLOC_ARENA_MAX=2, as package.json's start script sets it: glibc gives each thread that allocates its own arena
# and keeps what they freed; with Node's threads that was 10-25 MB of RSS outside V8's heap in B6 (docs/BENCHMARKS.md).
ENV HOST=0.0.0.0 \
    PORT=3000 \
    NODE_ENV=production \
    MALLOC_ARENA_MAX=2
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
# Compiled JavaScript only: no TypeScript loader at run time (it costs ~30 MB of RSS and a loader thread).
COPY --from=build /app/dist/src ./dist/src
COPY --from=build /app/dist/routes ./dist/routes
COPY --from=build /app/dist/tools ./dist/tools
# The browser console's static files (served by routes/console.ts; Preact and htm come from node_modules), and the
# typed client's browser bundle it uses when present (served as /console/vendor/client.js).
COPY public ./public
COPY --from=build /app/dist/client/browser.js ./dist/client/browser.js
# The code is root's and read-only to the image's unprivileged user (uid 1000), which runs the service: a
# compromised process cannot change what it runs. docker-compose.yml also mounts the root filesystem read-only.
USER node
EXPOSE 3000
# No curl in the slim image: Node's own fetch probes the health endpoint.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/healthz', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# The same command as package.json's "start" script (whose prestart step, the build, ran in the build stage),
# without npm in between, so SIGTERM reaches Node directly. `--max-semi-space-size=16`: Node 24 sizes V8's young
# generation from the heap limit (64 MB semi-spaces on a large machine, 16 MB on Node 20), which held garbage worth
# 80-100 MB more RSS in the idle and replay benchmarks (docs/BENCHMARKS.md, B5 and B6) at no measured throughput gain.
# `--heap-growing-percent=30`: after a full collection V8 lets the old generation grow to 1.3x what survived before
# the next (without it, up to 4x on a host with a heap limit of 2 GB or more: garbage worth 60-100 MB more RSS in B6
# and B2). While 8 or more runs are active the service lifts it to V8's own step and puts it back once none is
# (src/gc-policy.ts: fewer full collections under load, the small step when idle). The heap limit itself stays what
# Node derives from the memory it may use. `--expose-gc`: once the process is quiet after a burst, one last-resort
# collection gives back what the burst grew (src/gc-policy.ts `IdleTrim`: ~40 MB of RSS after boot, B6 ~190-215 MB
# -> ~150-165 MB).
CMD ["node", "--max-semi-space-size=16", "--heap-growing-percent=30", "--expose-gc", "dist/src/server.js"]
