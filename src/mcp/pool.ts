/**
 * Connections to the MCP servers of `MCP_SERVERS`: one MCP client (Streamable HTTP) per server in this process, shared
 * by every session's calls (requests of one client run concurrently, each its own HTTP request), its tool list
 * cached. Connecting is lazy; a connection whose transport fails (the server stopped, or restarted and forgot our
 * MCP session: HTTP 404) is dropped and the next use connects again.
 *
 * The tool list is listed again when the server says it changed (`notifications/tools/list_changed`, on the
 * standalone SSE stream) or after `MCP_TOOLS_TTL_MS`; while a server is unreachable its last list stays in use, so a
 * session keeps offering the tools and its calls get `is_error` results rather than vanishing from the model's view.
 *
 * The transport's byte-counting fetch is bounded-fetch.ts.
 *
 * Past 400 lines as one file: a connection's life (connect, list, call, drop) is one state machine per server, and
 * its errors (cut, too large, timeout, the run's abort) are told apart where the call is made; the parts would share
 * every private field.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import type { FastifyBaseLogger } from 'fastify';
import { McpCallCut, McpResultTooLarge, boundedFetch, describe, inCall } from './bounded-fetch.js';
import type { McpServerConfig } from './config.js';
import { jsonSchemaProblem } from '../json-schema-check.js';
import { DEFAULT_JSON_MAX_DEPTH, jsonTooDeep } from '../json-depth.js';

export interface McpPoolOptions {
  callTimeoutMs: number;
  /** A call's whole time, however often progress restarts `callTimeoutMs` (MCP_CALL_MAX_MS; absent: unbounded). */
  callMaxMs?: number;
  toolsTtlMs: number;
  connectTimeoutMs: number;
  /** TOOL_RESULT_MAX_BYTES: most bytes of a result's content; the wire is cut at twice this plus 64 KiB. */
  resultMaxBytes: number;
  log: FastifyBaseLogger;
}

/** A progress notice of a call in flight (MCP `notifications/progress`). */
export interface McpProgress {
  progress: number;
  total?: number;
  message?: string;
}

/** A server's tool list could not be had (never listed, and unreachable now). */
export class McpUnavailable extends Error {
  constructor(
    readonly server: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'McpUnavailable';
  }
}

/** Most tools kept of one server (pages of `tools/list` are read up to this). */
const MAX_TOOLS = 1000;
const MAX_PAGES = 50;
/**
 * A server's tool list is kept in memory per client (a tenant may have MCP_TENANT_MAX_SERVERS): at most this many
 * bytes of it (the tools' JSON), tools past it dropped; a description past DESCRIPTION_MAX characters is cut, and a
 * tool whose input schema the API would refuse (jsonSchemaProblem: size, depth, external refs) is not offered.
 */
const LIST_MAX_BYTES = 1_048_576;
const DESCRIPTION_MAX = 10_000;

/** Whether a tool can only be run as an MCP task (`execution.taskSupport: "required"`): such tools are not offered. */
const needsTask = (t: Tool) => t.execution?.taskSupport === 'required';

/** How long a shutdown waits for an MCP server to end our session (ms). */
const TERMINATE_TIMEOUT_MS = 1000;

interface Connection {
  client: Client;
  transport: StreamableHTTPClientTransport;
  /** Calls in flight: a dropped connection is closed when the last one settles. */
  inflight: number;
  dead: boolean;
}

/** The client of one MCP server in this process. */
export class McpServerClient {
  private conn: Promise<Connection> | null = null;
  private live: Connection | null = null;
  private tools: { list: Tool[]; at: number } | null = null;
  private listing: Promise<Tool[]> | null = null;
  /** Bumped when the list is known to be stale (a change notice, a reconnect): a listing in flight is not trusted. */
  private generation = 0;
  private lastError: string | null = null;
  private closed = false;
  /** When a call or a listing last used this client (tenant pool eviction). */
  lastUsed = Date.now();

  constructor(
    readonly config: McpServerConfig,
    private readonly opts: McpPoolOptions,
  ) {}

  /** Whether `tenant` may use this server. */
  allows(tenant: string): boolean {
    return this.config.tenants === null || this.config.tenants.has(tenant);
  }

  /** Calls in flight on the live connection (a busy client is not evicted). */
  get busy(): boolean {
    return (this.live?.inflight ?? 0) > 0;
  }

  /** The last connection or listing failure (null after a success), for `GET /v1/tools`. */
  get error(): string | null {
    return this.lastError;
  }

  /**
   * The tool list, cached. A stale list is answered at once while it is listed again in the background (a run never
   * waits for a server that stopped answering when it has a list), unless `wait` asks for the listing's outcome.
   * A failed listing falls back to the last list; with none, throws `McpUnavailable`.
   */
  async listTools(opts: { wait?: boolean } = {}): Promise<readonly Tool[]> {
    this.lastUsed = Date.now();
    const cached = this.tools;
    if (cached && Date.now() - cached.at < this.opts.toolsTtlMs) return cached.list;
    if (cached && !opts.wait) {
      this.refresh().catch(() => {});
      return cached.list;
    }
    try {
      return await this.refresh();
    } catch (err) {
      if (this.tools) return this.tools.list;
      throw err instanceof McpUnavailable
        ? err
        : new McpUnavailable(this.config.name, `cannot list the tools of MCP server "${this.config.name}"`, {
            cause: err,
          });
    }
  }

  /** Lists the tools now (one listing at a time; callers share it). */
  private refresh(): Promise<Tool[]> {
    if (this.listing) return this.listing;
    const gen = this.generation;
    const p = (async () => {
      const conn = await this.connection();
      const list: Tool[] = [];
      let bytes = 0;
      let cursor: string | undefined;
      for (let page = 0; page < MAX_PAGES && list.length < MAX_TOOLS; page++) {
        const res = await conn.client
          .listTools(cursor ? { cursor } : undefined, { timeout: this.opts.connectTimeoutMs })
          .catch((err: unknown) => this.failed(conn, err));
        // A tool that must run as an MCP task (call now, fetch the result later) is not offered.
        for (const t of res.tools) {
          if (list.length >= MAX_TOOLS || bytes >= LIST_MAX_BYTES) break;
          const kept = keepable(t);
          if (!kept) continue;
          bytes += JSON.stringify(kept).length;
          if (bytes <= LIST_MAX_BYTES) list.push(kept);
        }
        cursor = res.nextCursor;
        if (!cursor || bytes >= LIST_MAX_BYTES) break;
      }
      // A change notice that came while listing may describe a list newer than this one: keep it stale.
      this.tools = { list, at: gen === this.generation ? Date.now() : 0 };
      this.lastError = null;
      return list;
    })();
    this.listing = p;
    const clear = () => {
      if (this.listing === p) this.listing = null;
    };
    p.then(clear, clear);
    return p;
  }

  /** The list is stale (a change notice, a new connection): the next `listTools` lists again. */
  private invalidate(): void {
    this.generation++;
    if (this.tools) this.tools.at = 0;
  }

  /**
   * Calls a tool within the call timeout. Throws on a transport failure, a timeout or an abort (the caller makes
   * it an `is_error` result); a result with `isError` is returned as it is. A call the server refused before running
   * it because it forgot our MCP session (HTTP 404 or 400 after a restart) is sent once more on a new connection.
   */
  async callTool(
    name: string,
    args: Record<string, unknown> | undefined,
    signal: AbortSignal | undefined,
    onProgress?: (p: McpProgress) => void,
  ): Promise<CallToolResult> {
    this.lastUsed = Date.now();
    for (let attempt = 0; ; attempt++) {
      const conn = await this.connection();
      try {
        return await this.callOn(conn, name, args, signal, onProgress);
      } catch (err) {
        if (err instanceof McpResultTooLarge) throw err;
        const forgotten = err instanceof StreamableHTTPError && (err.code === 404 || err.code === 400);
        if (!(err instanceof McpError) || err.code === ErrorCode.ConnectionClosed) this.drop(conn, err);
        if (forgotten && attempt === 0 && !signal?.aborted) continue;
        throw err;
      }
    }
  }

  private async callOn(
    conn: Connection,
    name: string,
    args: Record<string, unknown> | undefined,
    signal: AbortSignal | undefined,
    onProgress: ((p: McpProgress) => void) | undefined,
  ): Promise<CallToolResult> {
    // One controller per call, aborted only while the call is in flight (the SDK never removes its abort listener,
    // so a signal that fires after the call would send a cancel notice for a finished request).
    const ac = new AbortController();
    let settled = false;
    const abort = (reason: unknown) => {
      if (!settled) ac.abort(reason);
    };
    const onRunAbort = () => abort(signal?.reason);
    signal?.addEventListener('abort', onRunAbort, { once: true });
    if (signal?.aborted) abort(signal.reason);
    conn.inflight++;
    try {
      const res = await inCall.run({ cut: (err) => abort(err) }, () =>
        conn.client.callTool({ name, ...(args ? { arguments: args } : {}) }, undefined, {
          signal: ac.signal,
          timeout: this.opts.callTimeoutMs,
          // A server that reports progress keeps its call alive: each notice starts the timeout again, up to the
          // call's whole bound (a server that never stops reporting cannot hold the run for ever).
          resetTimeoutOnProgress: true,
          ...(this.opts.callMaxMs !== undefined ? { maxTotalTimeout: this.opts.callMaxMs } : {}),
          onprogress: (p) => {
            if (!onProgress) return;
            onProgress({
              progress: p.progress,
              ...(p.total !== undefined ? { total: p.total } : {}),
              ...(typeof p.message === 'string' ? { message: p.message.slice(0, 1000) } : {}),
            });
          },
        }),
      );
      // The compatibility shape (`toolResult`) of protocol versions before 2024-11-05 is not accepted.
      if (!('content' in res) || !Array.isArray(res.content)) throw new Error('the result has no content');
      // The wire was bounded as it was read (boundedFetch); the content itself is bounded here, before any history.
      const bytes = Buffer.byteLength(JSON.stringify(res.content));
      if (bytes > this.opts.resultMaxBytes)
        throw new McpResultTooLarge(this.config.name, this.opts.resultMaxBytes, `answered ${bytes} bytes`);
      // Kept cast: both shapes of the SDK's result have an index signature, so the check above cannot narrow the
      // union to CallToolResult by itself; it is what tells the two apart.
      return res as CallToolResult;
    } catch (err) {
      const reason: unknown = ac.signal.reason;
      if (reason instanceof McpCallCut || reason instanceof McpResultTooLarge) throw reason;
      // The run's own abort (a cancel, an interrupt; a shutdown, lost lease or delete leave the call unanswered):
      // the SDK reports it as a request timeout, which it is not — the server may well have finished the call.
      if (signal?.aborted && reason === signal.reason)
        throw new Error(
          signal.reason === 'interrupt'
            ? 'interrupted before its result came (the MCP server may have completed the call)'
            : 'cancelled before this tool call completed',
          { cause: err },
        );
      if (err instanceof McpError && err.code === ErrorCode.RequestTimeout) {
        // The SDK says which bound it was: its message names the maximum total timeout when that one passed.
        const whole = /total/i.test(err.message) && this.opts.callMaxMs !== undefined;
        throw new Error(
          whole
            ? `the MCP server "${this.config.name}" did not finish within ${this.opts.callMaxMs} ms (MCP_CALL_MAX_MS), progress notwithstanding`
            : `the MCP server "${this.config.name}" did not answer within ${this.opts.callTimeoutMs} ms`,
          { cause: err },
        );
      }
      throw err;
    } finally {
      settled = true;
      signal?.removeEventListener('abort', onRunAbort);
      conn.inflight--;
      if (conn.dead && conn.inflight === 0) void conn.client.close().catch(() => {});
    }
  }

  /** The live connection, connecting when there is none (callers share one connect in flight). */
  private connection(): Promise<Connection> {
    if (this.closed) return Promise.reject(new McpUnavailable(this.config.name, 'the service is stopping'));
    if (this.conn) return this.conn;
    const p = this.connect().catch((err: unknown) => {
      if (this.conn === p) this.conn = null;
      this.lastError = describe(err);
      this.opts.log.warn({ err, mcp_server: this.config.name }, 'cannot connect to the MCP server');
      throw new McpUnavailable(
        this.config.name,
        `the MCP server "${this.config.name}" is unreachable: ${this.lastError}`,
        { cause: err },
      );
    });
    this.conn = p;
    return p;
  }

  private async connect(): Promise<Connection> {
    const { config, opts } = this;
    await config.guard?.();
    const client = new Client(
      { name: 'toolrunner-sessions', version: '0.1.0' },
      {
        listChanged: {
          tools: {
            autoRefresh: false,
            debounceMs: 0,
            onChanged: () => {
              this.invalidate();
              opts.log.info({ mcp_server: config.name }, 'MCP server tool list changed');
            },
          },
        },
      },
    );
    const transport = new StreamableHTTPClientTransport(config.url, {
      requestInit: { headers: config.headers },
      fetch: boundedFetch(config.name, opts.resultMaxBytes, opts.log, config.dispatcher),
      // The standalone SSE stream (change notices) is tried again twice; a server gone for longer drops the
      // connection (onerror below) and the next use connects anew.
      reconnectionOptions: {
        initialReconnectionDelay: 500,
        maxReconnectionDelay: 5000,
        reconnectionDelayGrowFactor: 2,
        maxRetries: 2,
      },
    });
    const conn: Connection = { client, transport, inflight: 0, dead: false };
    client.onerror = (err) => {
      // Transport trouble of any stream: a restarted server answers our old MCP session with 404, a stopped one
      // refuses. Drop the connection; calls in flight finish (or fail) on their own.
      this.drop(conn, err);
    };
    client.onclose = () => this.drop(conn, null);
    await client.connect(transport, { timeout: opts.connectTimeoutMs });
    if (this.closed) {
      await client.close().catch(() => {});
      throw new McpUnavailable(config.name, 'the service is stopping');
    }
    this.live = conn;
    // A new MCP session may be a new server (restarted, redeployed): its tools are listed again.
    this.invalidate();
    opts.log.info({ mcp_server: config.name }, 'connected to the MCP server');
    return conn;
  }

  /** A transport failure of a request on `conn`: the error is rethrown; the connection is dropped. */
  private failed(conn: Connection, err: unknown): never {
    if (!(err instanceof McpError) || err.code === ErrorCode.ConnectionClosed) this.drop(conn, err);
    throw err;
  }

  /** Forgets `conn` (the next use connects again) and closes it once its calls have settled. */
  private drop(conn: Connection, err: unknown): void {
    if (conn.dead) return;
    conn.dead = true;
    if (this.live === conn) {
      this.live = null;
      this.conn = null;
    }
    if (err) {
      this.lastError = describe(err);
      this.opts.log.warn({ err, mcp_server: this.config.name }, 'MCP connection dropped');
    }
    if (conn.inflight === 0) void conn.client.close().catch(() => {});
  }

  /** Closes the connection (shutdown); calls in flight are aborted by the transport's close. */
  async close(): Promise<void> {
    this.closed = true;
    const conn = this.live;
    this.live = null;
    this.conn = null;
    if (conn) {
      conn.dead = true;
      // The server's MCP session ends with us (DELETE, as the spec asks of a client that leaves), within
      // TERMINATE_TIMEOUT_MS: closing the client aborts a DELETE to a server that is down or slow.
      const timer = setTimeout(() => void conn.client.close().catch(() => {}), TERMINATE_TIMEOUT_MS);
      await conn.transport.terminateSession().catch(() => {});
      clearTimeout(timer);
      await conn.client.close().catch(() => {});
    }
    await this.config.dispatcher?.destroy().catch(() => {});
  }
}

/** A listed tool as offered (its description cut at DESCRIPTION_MAX), or null when it is not (see LIST_MAX_BYTES). */
function keepable(t: Tool): Tool | null {
  if (needsTask(t)) return null;
  let schema: string;
  try {
    schema = JSON.stringify(t.inputSchema);
  } catch {
    return null; // nested past what JSON.stringify can walk
  }
  // The depth first: the schema checks below walk it recursively.
  if (jsonTooDeep(schema, DEFAULT_JSON_MAX_DEPTH) || jsonSchemaProblem(t.inputSchema) !== null) return null;
  const d = t.description;
  return d !== undefined && d.length > DESCRIPTION_MAX
    ? { ...t, description: d.slice(0, DESCRIPTION_MAX) }
    : t;
}
