# syntax=docker/dockerfile:1

# --- deps: production node_modules only (tsx, which runs the TypeScript sources, is a production dependency) ---
FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# --- runtime ---
FROM node:20-bookworm-slim AS runtime
WORKDIR /app
ENV HOST=0.0.0.0 \
    PORT=3000 \
    NODE_ENV=production
COPY --from=deps --chown=node:node /app/node_modules ./node_modules
COPY --chown=node:node package.json tsconfig.json ./
COPY --chown=node:node src ./src
COPY --chown=node:node routes ./routes
COPY --chown=node:node tools ./tools
# The image's unprivileged user (uid 1000).
USER node
EXPOSE 3000
# No curl in the slim image: Node's own fetch probes the health endpoint.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/healthz', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# The same command as package.json's "start" script, without npm in between, so SIGTERM reaches Node directly.
CMD ["node", "--import", "tsx", "src/server.ts"]
