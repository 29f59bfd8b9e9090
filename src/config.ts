/**
 * The environment as one validated `Config` (zod): every variable the service reads, its default and its bounds,
 * plus the `*_FILE` secrets. One file over 400 lines on purpose: it is the one place an operator's setting is
 * parsed, and docs/API.md §8 lists the same variables in the same words.
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { z } from 'zod';
import { mcpServersVar, missingEnvRefs, resolveMcpServers } from './mcp/config.js';
import { modelPricesSchema } from './cost/prices.js';

const port = z.coerce.number().int().min(0).max(65535);
const positiveMs = z.coerce.number().int().positive();

/** `ip`, `ipv4:port` or `[ipv6]:port`, as the DNS resolver's setServers takes them. */
function isNameserver(entry: string): boolean {
  const m = /^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$/.exec(entry) ?? /^([0-9.]+):(\d{1,5})$/.exec(entry);
  if (m) return isIP(m[1]!) !== 0 && Number(m[2]) > 0 && Number(m[2]) < 65536;
  return isIP(entry) !== 0;
}

/** `tenant:key` pairs, comma-separated. A key maps to exactly one tenant. */
const apiKeys = z.string().transform((raw, ctx) => {
  const keys = new Map<string, string>();
  for (const pair of raw
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const at = pair.indexOf(':');
    const tenant = pair.slice(0, at).trim();
    const key = pair.slice(at + 1).trim();
    if (at <= 0 || !key || !/^[A-Za-z0-9_.-]{1,64}$/.test(tenant)) {
      ctx.addIssue({
        code: 'custom',
        message: `expected "tenant:key[,tenant:key…]", got an entry "${pair.slice(0, 20)}…"`,
      });
      return z.NEVER;
    }
    if (keys.has(key)) {
      ctx.addIssue({ code: 'custom', message: 'the same key is given twice' });
      return z.NEVER;
    }
    keys.set(key, tenant);
  }
  return keys;
});

const hostPort = z.string().transform((raw, ctx) =>
  raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((hp) => {
      const m = /^(.+):(\d{1,5})$/.exec(hp);
      if (!m) {
        ctx.addIssue({ code: 'custom', message: `expected host:port, got "${hp}"` });
        return { host: '', port: 0 };
      }
      return { host: m[1]!, port: Number(m[2]) };
    }),
);

/** Browser origins (`scheme://host[:port]`), comma-separated; `*` is refused: list the origins. */
const origins = z.string().transform((raw, ctx) =>
  raw
    .split(',')
    .map((s) => s.trim().replace(/\/+$/, ''))
    .filter(Boolean)
    .map((o) => {
      let parsed: URL | undefined;
      try {
        parsed = new URL(o);
      } catch {
        /* reported below */
      }
      if (!parsed || !/^https?:$/.test(parsed.protocol) || parsed.origin !== o) {
        ctx.addIssue({
          code: 'custom',
          message: `expected origins like https://app.example.com, got "${o}"`,
        });
      }
      return o;
    }),
);

/** MODEL_PRICES: JSON `{"<family>": {"input", "output", …}}` (src/cost/prices.ts), checked at boot. */
const modelPrices = z.string().transform((raw, ctx) => {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (err) {
    ctx.addIssue({
      code: 'custom',
      message: `not JSON (${err instanceof Error ? err.message : String(err)}); expected {"claude-…": {"input": 3, "output": 15}}`,
    });
    return z.NEVER;
  }
  const parsed = modelPricesSchema.safeParse(json);
  if (!parsed.success) {
    for (const issue of parsed.error.issues)
      ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message });
    return z.NEVER;
  }
  return parsed.data;
});

/** A cloud region name: `us-east-1`, `us-east5`, `global`. */
const cloudRegion = z.string().regex(/^[a-z][a-z0-9-]{1,30}[a-z0-9]$/, 'expected a region such as us-east-1');

const logLevel = z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

/** The variables as they are read; `configSchema` adds the defaults that depend on another variable. */
const variables = z.object({
  PORT: port.default(3000),
  HOST: z.string().min(1).default('127.0.0.1'),
  REDIS_URL: z.url({ protocol: /^rediss?$/, error: 'a redis:// or rediss:// URL' }).optional(),
  REDIS_CLUSTER_NODES: hostPort.optional(),
  /** The password of REDIS_URL's Redis (`requirepass`), when the URL has none; `REDIS_PASSWORD_FILE` reads it. */
  REDIS_PASSWORD: z.string().min(1).max(512).optional(),
  /** Without REDIS_URL: a Redis answering here is used before an embedded redis-server is started. */
  LOCAL_REDIS_URL: z
    .url({ protocol: /^rediss?$/, error: 'a redis:// or rediss:// URL' })
    .default('redis://127.0.0.1:6379'),
  /**
   * Put before every key the service writes and every pub/sub channel it uses, so services (or other applications)
   * sharing one Redis never see each other's data. No braces: the keys' Cluster hash tags `{…}` must stay the first.
   * `none`: no prefix (the layout before the prefix existed; an empty variable means unset, so the default).
   */
  REDIS_KEY_PREFIX: z
    .string()
    .max(64)
    .regex(
      /^[A-Za-z0-9:._-]*$/,
      'letters, digits and : . _ - only (no braces: they would move the hash tags)',
    )
    .default('trs:')
    .transform((p) => (p === 'none' ? '' : p)),
  ANTHROPIC_API_KEY: z.string().min(1).optional(),
  ANTHROPIC_BASE_URL: z.url().optional(),
  /** Which SDK client reaches the model (src/providers.ts); the others' variables are ignored. */
  ANTHROPIC_PROVIDER: z.enum(['anthropic', 'bedrock', 'vertex']).default('anthropic'),
  /** Bedrock: the region (required), and a base URL instead of `https://bedrock-runtime.<region>.amazonaws.com`. */
  AWS_REGION: cloudRegion.optional(),
  ANTHROPIC_BEDROCK_BASE_URL: z.url().optional(),
  /** Bedrock credentials: a static key pair (else the AWS default chain: profile, SSO, IMDS…), or an API key. */
  AWS_ACCESS_KEY_ID: z.string().min(1).optional(),
  AWS_SECRET_ACCESS_KEY: z.string().min(1).optional(),
  AWS_SESSION_TOKEN: z.string().min(1).optional(),
  AWS_BEARER_TOKEN_BEDROCK: z.string().min(1).optional(),
  /** Vertex: region (`us-east5`, `global`…) and project (both required), a base URL instead of Google's. */
  CLOUD_ML_REGION: cloudRegion.optional(),
  ANTHROPIC_VERTEX_PROJECT_ID: z
    .string()
    .regex(/^[a-z0-9][a-z0-9:.-]{0,62}$/, 'expected a Google Cloud project id')
    .optional(),
  ANTHROPIC_VERTEX_BASE_URL: z.url().optional(),
  /** Vertex: a static OAuth access token (tests, or a token kept fresh outside); else Application Default Credentials. */
  ANTHROPIC_VERTEX_ACCESS_TOKEN: z.string().min(1).optional(),
  API_KEYS: apiKeys.optional(),
  /** Origins whose pages may call the REST API (CORS) and open WebSockets; unset: no CORS, any Origin upgrades. */
  CORS_ORIGINS: origins.optional(),
  LOG_LEVEL: logLevel.default('info'),
  /** Where the embedded redis-server keeps its append-only file. */
  DATA_DIR: z.string().min(1).default('.data'),
  /** A run's lease in Redis; renewed every third of it while the run lives. */
  LEASE_TTL_MS: positiveMs.default(10_000),
  /** Lease of a claimed tool task (spec §7.1): a worker heartbeats within it or the call is offered again. */
  TOOL_TASK_LEASE_MS: z.coerce.number().int().min(1000).max(600_000).default(30_000),
  /** Most tenant tools per tenant (PUT /v1/tools/:name). */
  TENANT_MAX_TOOLS: z.coerce.number().int().min(1).max(10_000).default(100),
  /**
   * Most tool tasks of one tenant queued, leased or undelivered at once; a call past it is answered with an error. At
   * most 1000: a tenant's first claim after an upgrade indexes its queued calls by tool (tenant-tools/lua/claim-6.lua),
   * and an http caller's look at a tenant's queue reads it whole (http-left-1.lua), so the bound is those scripts' work.
   */
  TOOL_TASKS_MAX_PER_TENANT: z.coerce.number().int().min(1).max(1000).default(1000),
  /**
   * Most bytes one tool task claim answers (its calls' inputs and records): a claim stops before the call that would
   * pass it (which the next claim takes), but always takes one. Bounds the claim's Redis script and its reply, which
   * `max` calls of BODY_LIMIT inputs each made seconds long (src/tenant-tools/lua/claim-6.lua).
   */
  TOOL_TASK_CLAIM_MAX_BYTES: z.coerce.number().int().min(65_536).max(67_108_864).default(4_194_304),
  /**
   * Most long-poll claims (`wait_ms` > 0) of one tenant waiting at once on one replica; one more that finds no call
   * is refused 429 `quota_exceeded` (`details.quota: "waiting_claims"`, Retry-After 1) instead of waiting.
   */
  TOOL_TASK_MAX_WAITING_CLAIMS: z.coerce.number().int().min(1).max(10_000).default(64),
  /** How long SIGTERM waits for running turns before their leases are released. */
  SHUTDOWN_GRACE_MS: positiveMs.default(10_000),
  /** Events kept per session log; the oldest are trimmed beyond (src/store/lua/includes/event-log.lua). */
  EVENT_LOG_MAX: positiveMs.default(10_000),
  /** Bytes of event data kept per session log (type + data + 32 per event); the oldest are trimmed beyond. */
  EVENT_LOG_MAX_BYTES: positiveMs.default(16 * 1024 * 1024),
  /**
   * Bytes one user turn made of follow-ups may reach: the trailing user turn they join (if the history ends with
   * one) and every follow-up queued for it. A follow-up beyond is refused with 413 `payload_too_large`. The tool
   * results of one step together too (their `tool_result` blocks): a client's result beyond is refused (413), a
   * tool's result the service takes becomes an error saying so (src/store/pending.ts `fitResults`).
   */
  MAX_TURN_BYTES: positiveMs.default(4 * 1024 * 1024),
  /** Request body limit in bytes. */
  BODY_LIMIT: positiveMs.default(1_048_576),
  /** Idempotency records expire after this many seconds. */
  IDEMPOTENCY_TTL_S: positiveMs.default(86_400),
  /** Bytes of `Idempotency-Key` answers kept per tenant: past it its oldest are forgotten first. */
  IDEMPOTENCY_MAX_BYTES_PER_TENANT: z.coerce.number().int().min(1_048_576).default(67_108_864),
  /** SDK retries of 408/409/429/5xx/connection errors for each turn. */
  UPSTREAM_MAX_RETRIES: z.coerce.number().int().min(0).max(10).default(2),
  /** The SDK's `timeout` of each upstream request (ms): until its answer's headers, or a non-streamed answer. */
  UPSTREAM_TIMEOUT_MS: positiveMs.default(600_000),
  /** A streamed upstream answer silent this long (ms; the API pings meanwhile) is aborted: a retryable failure. */
  UPSTREAM_IDLE_MS: positiveMs.default(120_000),
  /** Queued WebSocket bytes after which a slow reader is closed with 1013. */
  WS_MAX_BUFFER_BYTES: positiveMs.default(1_048_576),
  WS_PING_MS: positiveMs.default(30_000),
  /**
   * SSE `: ping` comments and WebSocket `{"type":"ping"}` frames are sent this often on an event stream that is
   * otherwise quiet (proxies and clients learn it is alive); a client token's stream is re-checked as often.
   */
  STREAM_HEARTBEAT_MS: z.coerce.number().int().min(100).max(300_000).default(15_000),
  /** A replaying WebSocket/SSE client whose socket does not drain for this long is closed as a slow reader. */
  SLOW_READER_TIMEOUT_MS: positiveMs.default(30_000),
  /**
   * Byte budget of one page of a session's event log (replays, the live relay's reads, JSON pages): a replaying
   * client holds at most one page (plus one event larger than the budget, which comes alone).
   */
  REPLAY_PAGE_BYTES: positiveMs.default(1_048_576),
  /** Longest a client may take to send a whole request (headers and body); then 408 and the socket is closed. */
  REQUEST_TIMEOUT_MS: positiveMs.default(30_000),
  /**
   * A socket with no traffic either way for this long is closed (keep-alive idle, stalled uploads). Longer than the
   * SSE heartbeat (15 s) and than a load balancer's idle timeout (often 60 s); upgraded WebSockets have their own
   * pings (WS_PING_MS) instead.
   */
  CONNECTION_TIMEOUT_MS: positiveMs.default(72_000),
  /** Open TCP connections one process accepts (HTTP, SSE and WebSocket together); beyond, new ones are dropped. */
  MAX_CONNECTIONS: positiveMs.default(10_000),
  /**
   * Listening sockets on PORT (SO_REUSEPORT, Linux only; src/accept-sockets.ts): a busy process accepts one new
   * connection per socket per turn of its event loop, so more sockets take a burst of new connections (WebSocket
   * followers reconnecting after a replica died) sooner. 1: one socket, no SO_REUSEPORT.
   */
  ACCEPT_SOCKETS: z.coerce.number().int().min(1).max(64).default(16),
  /** Mutating requests per minute per tenant, across replicas (429 `rate_limited`). 0 disables the limit. */
  RATE_LIMIT_PER_MIN: z.coerce.number().int().min(0).default(1200),
  /**
   * Request body bytes per minute per tenant (by Content-Length), across replicas (429 `rate_limited`, Retry-After):
   * the request count alone lets a tenant fill a process with BODY_LIMIT-sized bodies. 0 disables it.
   */
  TENANT_MAX_INGEST_BYTES_PER_MIN: z.coerce
    .number()
    .int()
    .min(0)
    .default(64 * 1024 * 1024),
  /**
   * Mutating requests per minute per client token, across replicas (429 `rate_limited`), besides its tenant's
   * count: a browser holding a token takes at most this much of RATE_LIMIT_PER_MIN. Unset: a quarter of
   * RATE_LIMIT_PER_MIN, rounded up (so 0, no limit, when that is 0). 0: no limit of its own.
   */
  CLIENT_TOKEN_RATE_LIMIT_PER_MIN: z.coerce.number().int().min(0).optional(),
  /** Most sessions one tenant keeps (429 `quota_exceeded`). 0: no limit. */
  TENANT_MAX_SESSIONS: z.coerce.number().int().min(0).default(100_000),
  /**
   * Most event streams (WebSockets, SSE, chat streams together) one tenant holds open at once, across replicas (429
   * `quota_exceeded`). 0: no limit. Unset: TENANT_MAX_WEBSOCKETS (the contract's name, §6.4), else 1000; the
   * refusal names whichever was set (`streamsQuota`).
   */
  TENANT_MAX_STREAMS: z.coerce.number().int().min(0).optional(),
  TENANT_MAX_WEBSOCKETS: z.coerce.number().int().min(0).optional(),
  /**
   * Most event streams (WebSockets, SSE, chat streams) one client token holds open at once, across replicas (429
   * `quota_exceeded`), besides its tenant's TENANT_MAX_STREAMS, in which they count too. 0: no limit of its own.
   */
  CLIENT_TOKEN_MAX_STREAMS: z.coerce.number().int().min(0).default(4),
  /** A REST answer not taken whole by its client within this long (ms) has its connection cut. */
  RESPONSE_WRITE_TIMEOUT_MS: positiveMs.default(30_000),
  /** Bytes of answers one tenant's clients may leave unread at once, per process (429 `quota_exceeded`). */
  TENANT_MAX_BUFFERED_BYTES: positiveMs.default(67_108_864),
  /**
   * Bytes one tenant's event streams (WebSockets, SSE, chat streams) may hold queued for their clients at once, per
   * process; beyond, its streams holding the most are cut as slow readers (src/events/tenant-buffers.ts). 0: no bound.
   */
  TENANT_MAX_STREAM_BUFFERED_BYTES: z.coerce.number().int().min(0).default(67_108_864),
  /** Bytes one connection may hold unflushed; beyond, it is cut. */
  CONNECTION_MAX_BUFFERED_BYTES: positiveMs.default(33_554_432),
  /**
   * Expensive reads (a list page, a whole history, the iteration records, a JSON page of events) of one tenant
   * made at once, per process; the tenant's others wait in its own line, so another tenant's request waits for at
   * most this many of them.
   */
  TENANT_HEAVY_READS: z.coerce.number().int().min(1).default(1),
  /**
   * Most sessions of one tenant in `running` at once, across replicas: a request that would start one more run
   * (create, message, results, decision, continue, retry, resume) answers 429 `quota_exceeded`. 0: no limit.
   */
  TENANT_MAX_ACTIVE_RUNS: z.coerce.number().int().min(0).default(100),
  /**
   * Most bytes one tenant stores, across replicas (history, iteration records, queued follow-ups, events, tool tasks'
   * inputs and results; see src/store/storage-quota.ts): beyond, a client's write that adds content answers 429
   * `quota_exceeded` `storage_bytes`; a stop (cancel, a call's denial, a revoke, a delete, a pause) never does. 0: no
   * limit.
   */
  TENANT_MAX_BYTES: z.coerce.number().int().min(0).default(1_073_741_824),
  /** Most runs one process drives at once; more wait in `runs:due` (any replica may take them). */
  MAX_ACTIVE_RUNS: positiveMs.default(5000),
  /** Webhooks (spec §6.3; src/webhooks). Private, loopback and link-local targets are refused unless true. */
  /**
   * Per try (ms, 2 tries per nameserver, each waiting this long at most) of the DNS queries for the hosts of tenants'
   * URLs (webhooks, HTTP tools, tenant MCP servers; src/webhooks/name-resolver.ts).
   */
  OUTBOUND_DNS_TIMEOUT_MS: positiveMs.default(2000),
  /** Nameservers (`host` or `host:port`, comma-separated) for those queries instead of /etc/resolv.conf's. */
  OUTBOUND_DNS_SERVERS: z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    )
    .refine(
      (list) => list.every(isNameserver),
      'expected IP addresses, each with an optional :port ([v6]:port)',
    ),
  /**
   * The search list for those names (comma-separated domains) instead of /etc/resolv.conf's `search`; empty: none.
   * Unset: that file's.
   */
  OUTBOUND_DNS_SEARCH: z
    .string()
    .optional()
    .transform((v) =>
      v === undefined
        ? null
        : v
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean),
    ),
  WEBHOOK_ALLOW_PRIVATE: z
    .enum(['true', 'false', '1', '0'])
    .default('false')
    .transform((v) => v === 'true' || v === '1'),
  /** 32 bytes (base64 or hex): webhook secrets are stored AES-256-GCM encrypted with it; unset, stored as is. */
  WEBHOOK_SECRET_KEY: z
    .string()
    .refine(
      (v) => (/^[0-9a-f]{64}$/i.test(v) ? 32 : Buffer.from(v, 'base64').length) === 32,
      '32 bytes, in base64 or hex (e.g. `openssl rand -base64 32`)',
    )
    .optional(),
  /** First retry delay (ms); each next one doubles, with jitter, up to WEBHOOK_RETRY_MAX_MS. */
  WEBHOOK_RETRY_BASE_MS: positiveMs.default(5_000),
  WEBHOOK_RETRY_MAX_MS: positiveMs.default(3_600_000),
  /** A delivery is retried for this long after its first attempt; an endpoint failing this long is disabled. */
  WEBHOOK_RETRY_FOR_MS: positiveMs.default(86_400_000),
  /** One attempt's time limit (ms). */
  WEBHOOK_TIMEOUT_MS: positiveMs.default(10_000),
  /** Attempts in flight at once per endpoint, across all replicas. */
  WEBHOOK_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(4),
  WEBHOOK_MAX_PER_TENANT: z.coerce.number().int().min(1).max(1000).default(20),
  /** Undelivered events kept per endpoint; beyond it new ones are dropped (and logged). */
  WEBHOOK_MAX_PENDING: positiveMs.default(10_000),
  /** Bytes of the undelivered events kept per endpoint (each a copy of its event): newer ones are dropped. */
  WEBHOOK_MAX_PENDING_BYTES: z.coerce.number().int().min(65_536).default(16_777_216),
  /** How often each replica looks for due deliveries and unswept event logs (ms). */
  WEBHOOK_POLL_MS: positiveMs.default(500),
  /**
   * A session marked as having events for webhooks is swept one last time this long after its newest mark (ms),
   * so events written by a replica that died before fanning them out are still delivered. Must exceed the
   * clock skew between replicas plus a few seconds, and with WEBHOOK_POLL_MS stay below DELETED_LOG_TTL_MS (checked
   * at boot): a deleted session's log, its `session.deleted` included, is gone after that.
   */
  WEBHOOK_SWEEP_GRACE_MS: positiveMs.default(30_000),
  /** MCP servers whose tools sessions may use (spec §6.2; src/mcp/config.ts): JSON, `${ENV}` in header values. */
  MCP_SERVERS: mcpServersVar.optional(),
  /** One MCP tool call's time limit (ms); beyond it the model gets an `is_error` result. */
  MCP_CALL_TIMEOUT_MS: positiveMs.default(60_000),
  /** One MCP tool call's whole time (ms), whatever progress it reports (each notice restarts MCP_CALL_TIMEOUT_MS). */
  MCP_CALL_MAX_MS: positiveMs.default(600_000),
  /** An MCP server's tool list is listed again after this long (ms), or at once on `notifications/tools/list_changed`. */
  MCP_TOOLS_TTL_MS: positiveMs.default(300_000),
  /** Connecting to an MCP server (initialize) and listing its tools may take this long (ms). */
  MCP_CONNECT_TIMEOUT_MS: positiveMs.default(10_000),
  /**
   * Most bytes of one tool result, from any source the service runs (MCP servers, …): a larger one becomes an
   * `is_error` result naming this limit. An MCP answer is cut as it is read (at twice this plus 64 KiB on the wire).
   */
  TOOL_RESULT_MAX_BYTES: z.coerce.number().int().min(1024).max(67_108_864).default(1_048_576),
  /** Tenant MCP servers (`/v1/mcp-servers`): most per tenant, connections kept per process, idle time before one closes. */
  MCP_TENANT_MAX_SERVERS: z.coerce.number().int().min(1).max(1000).default(20),
  MCP_TENANT_POOL_MAX: z.coerce.number().int().min(1).max(10_000).default(256),
  MCP_TENANT_IDLE_MS: positiveMs.default(300_000),
  /** `tool.progress` events kept per MCP call per second (more are dropped; the last one always goes). */
  MCP_PROGRESS_PER_SEC: z.coerce.number().int().min(1).max(100).default(2),
  /** The memory tool (src/memory/): most bytes (UTF-8) of one file, of all a tenant's files, and files per tenant. */
  MEMORY_MAX_FILE_BYTES: z.coerce.number().int().min(1).max(16_777_216).default(65_536),
  MEMORY_MAX_TENANT_BYTES: z.coerce.number().int().min(1).max(1_073_741_824).default(10_485_760),
  MEMORY_MAX_FILES: z.coerce.number().int().min(1).max(100_000).default(1000),
  /**
   * Answers up to this many bytes of JSON are checked against their route's response schema before they are sent;
   * larger ones are sent unchecked (see src/openapi/serializer.ts). Unset: 65536 when NODE_ENV=production, else
   * every answer (the tests' drift check).
   */
  RESPONSE_CHECK_MAX_BYTES: z.coerce.number().int().min(0).optional(),
  /** Schedules (spec §7.6; src/schedules): most per tenant, and how often each replica looks for due fires (ms). */
  SCHEDULES_MAX_PER_TENANT: z.coerce.number().int().min(1).max(10_000).default(100),
  SCHEDULE_SWEEP_MS: positiveMs.default(1000),
  /** How often each replica looks for sub-agent calls to start and children that ended (ms). */
  AGENT_SWEEP_MS: positiveMs.default(250),
  /** Tests only: a schedule's cron may have 6 fields (seconds first), so fires come every second. */
  SCHEDULES_TEST_SECONDS: z
    .enum(['true', 'false', '1', '0'])
    .default('false')
    .transform((v) => v === 'true' || v === '1'),
  /** §7.4 cost: prices per model family over the list prices (JSON; src/cost/prices.ts). */
  MODEL_PRICES: modelPrices.optional(),
  /** Dollars one tenant's turns may cost per UTC day, across replicas (then `tenant_budget_exhausted`). 0: no cap. */
  TENANT_MAX_COST_USD_PER_DAY: z.coerce.number().min(0).max(1_000_000_000).default(0),
  /** Days a tenant's daily usage (GET /v1/usage) is kept. */
  USAGE_RETENTION_DAYS: z.coerce.number().int().min(2).max(3660).default(400),
  /** The token and cost metrics carry a `tenant` label (one series per tenant: mind the cardinality). */
  METRICS_TENANT_LABEL: z
    .enum(['true', 'false', '1', '0'])
    .default('false')
    .transform((v) => v === 'true' || v === '1'),
  /** §7.4 retention: the `ttl_s` of sessions created without one (seconds); 0: kept for ever. */
  SESSION_TTL_S: z.coerce.number().int().min(0).max(3_153_600_000).default(0),
  /** How often each replica sweeps the due action deadlines and session expiries (ms). */
  DEADLINE_SWEEP_MS: positiveMs.default(1000),
  /** Tests only: the least `action_timeout_s` (the contract's is 10). */
  ACTION_TIMEOUT_MIN_S: z.coerce.number().int().min(1).max(10).default(10),
  /**
   * Tests only: how long the event log of a deleted session (a DELETE, or its TTL) or schedule keeps its last event
   * (ms). Above WEBHOOK_SWEEP_GRACE_MS + WEBHOOK_POLL_MS (checked at boot).
   */
  DELETED_LOG_TTL_MS: positiveMs.default(60_000),
  /** Offline model's delay between SSE events (ms). */
  OFFLINE_EVENT_DELAY_MS: z.coerce.number().int().min(0).default(15),
});

export const configSchema = variables.transform((c) => ({
  ...c,
  CLIENT_TOKEN_RATE_LIMIT_PER_MIN: c.CLIENT_TOKEN_RATE_LIMIT_PER_MIN ?? Math.ceil(c.RATE_LIMIT_PER_MIN / 4),
}));

export type Config = z.infer<typeof configSchema>;

export class ConfigError extends Error {}

/** Parses the environment; a bad value throws a ConfigError that names the variable. */
/** Secrets that may come from a file (`<NAME>_FILE`: Docker and Compose secrets) rather than the environment. */
const FILE_SECRETS = ['API_KEYS', 'ANTHROPIC_API_KEY', 'WEBHOOK_SECRET_KEY', 'REDIS_PASSWORD'] as const;

/**
 * `<NAME>_FILE` read into `<NAME>` (its content, surrounding white space trimmed): a secret mounted as a file is not
 * in the process's environment, so `docker inspect` and /proc/<pid>/environ do not show it. Setting both is an
 * error, and so is a file that cannot be read. An empty file means unset, as an empty variable does (a Compose
 * secret file left empty for an optional secret).
 */
function withFileSecrets(env: Record<string, string>): Record<string, string> {
  const out = { ...env };
  const problems: string[] = [];
  for (const name of FILE_SECRETS) {
    const file = env[`${name}_FILE`];
    delete out[`${name}_FILE`];
    if (file === undefined) continue;
    if (env[name] !== undefined) {
      problems.push(`  ${name}_FILE: set ${name} or ${name}_FILE, not both`);
      continue;
    }
    try {
      const value = readFileSync(file, 'utf8').trim();
      if (value !== '') out[name] = value;
    } catch (err) {
      problems.push(
        `  ${name}_FILE: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
      );
    }
  }
  if (problems.length) throw new ConfigError(`Invalid configuration:\n${problems.join('\n')}`);
  return out;
}

/** The tenants' open-streams quota: its limit, and the name its refusals give (the variable the operator set). */
export function streamsQuota(config: Config): {
  name: 'TENANT_MAX_STREAMS' | 'TENANT_MAX_WEBSOCKETS';
  limit: number;
} {
  if (config.TENANT_MAX_STREAMS !== undefined)
    return { name: 'TENANT_MAX_STREAMS', limit: config.TENANT_MAX_STREAMS };
  if (config.TENANT_MAX_WEBSOCKETS !== undefined)
    return { name: 'TENANT_MAX_WEBSOCKETS', limit: config.TENANT_MAX_WEBSOCKETS };
  return { name: 'TENANT_MAX_STREAMS', limit: 1000 };
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // An empty variable means unset, as in `docker compose` files with `${X:-}`.
  const cleaned = withFileSecrets(
    Object.fromEntries(
      Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined && e[1] !== ''),
    ),
  );
  const parsed = configSchema.safeParse(cleaned);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.') || '(env)'}: ${i.message}`);
    throw new ConfigError(`Invalid configuration:\n${lines.join('\n')}`);
  }
  const config = parsed.data;
  if (config.REDIS_PASSWORD !== undefined) {
    if (!config.REDIS_URL)
      throw new ConfigError('Invalid configuration:\n  REDIS_PASSWORD: set REDIS_URL too');
    const url = new URL(config.REDIS_URL);
    url.password = encodeURIComponent(config.REDIS_PASSWORD);
    config.REDIS_URL = url.toString();
  }
  if (config.MCP_SERVERS) {
    const missing = missingEnvRefs(config.MCP_SERVERS, env);
    if (missing.length)
      throw new ConfigError(`Invalid configuration:\n${missing.map((m) => `  MCP_SERVERS.${m}`).join('\n')}`);
    config.MCP_SERVERS = resolveMcpServers(config.MCP_SERVERS, env);
  }
  const provider = providerProblems(config);
  if (provider.length)
    throw new ConfigError(`Invalid configuration:\n${provider.map((p) => `  ${p}`).join('\n')}`);
  const sweep = config.WEBHOOK_SWEEP_GRACE_MS + config.WEBHOOK_POLL_MS;
  if (sweep >= config.DELETED_LOG_TTL_MS) {
    throw new ConfigError(
      `Invalid configuration:\n  WEBHOOK_SWEEP_GRACE_MS: ${config.WEBHOOK_SWEEP_GRACE_MS} plus WEBHOOK_POLL_MS ` +
        `(${config.WEBHOOK_POLL_MS}) must be below DELETED_LOG_TTL_MS (${config.DELETED_LOG_TTL_MS}): the ` +
        "`session.deleted` of a replica that died before its webhooks' fan-out is delivered by another " +
        "replica's sweep that long after, and the deleted session's log, with that event, expires after " +
        'DELETED_LOG_TTL_MS (it would never be delivered)',
    );
  }
  if (!config.API_KEYS && !isLoopback(config.HOST)) {
    throw new ConfigError(
      `Invalid configuration:\n  API_KEYS: required when HOST (${config.HOST}) is not a loopback address; ` +
        'set API_KEYS="tenant:key,…" or bind HOST=127.0.0.1',
    );
  }
  return config;
}

/** What ANTHROPIC_PROVIDER needs besides its own variable, checked at boot rather than at the first turn. */
function providerProblems(config: Config): string[] {
  const problems: string[] = [];
  const needs = (name: keyof Config, what: string) => {
    if (config[name] === undefined)
      problems.push(`${name}: required when ANTHROPIC_PROVIDER=${config.ANTHROPIC_PROVIDER} (${what})`);
  };
  if (config.ANTHROPIC_PROVIDER === 'bedrock') {
    needs('AWS_REGION', 'the Bedrock region, e.g. us-east-1');
    if ((config.AWS_ACCESS_KEY_ID === undefined) !== (config.AWS_SECRET_ACCESS_KEY === undefined))
      problems.push(
        'AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: set both or neither (neither: the AWS default chain)',
      );
    if (config.AWS_SESSION_TOKEN !== undefined && config.AWS_ACCESS_KEY_ID === undefined)
      problems.push('AWS_SESSION_TOKEN: needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY');
  } else if (config.ANTHROPIC_PROVIDER === 'vertex') {
    needs('CLOUD_ML_REGION', 'the Vertex AI region, e.g. us-east5 or global');
    needs('ANTHROPIC_VERTEX_PROJECT_ID', 'the Google Cloud project that serves Claude');
  }
  return problems;
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}
