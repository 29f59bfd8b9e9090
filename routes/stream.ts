/**
 * The WebSocket event stream (GET /v1/sessions/:id/stream, docs/API.md §6.3): the upgrade's checks, and one WsConn
 * per open socket (its transport for the sink, its client frames, its token watch, its close line). One file just
 * over 400 lines: the route and the connection it opens change together; the frames' handling is
 * src/events/frames.ts, the sink src/events/sink.ts.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { RawData, WebSocket } from 'ws';
import { z } from 'zod';
import type { Config } from '../src/config.js';
import { sessionIdParam } from '../src/schemas.js';
import { routeErrors, type RouteCodes } from '../src/openapi/responses.js';
import { HttpRefusal, TokenExpired } from '../src/plugins/error-status.js';
import { START, cursorParam, isAhead, parseCursor } from '../src/events/cursor.js';
import { checkReadable } from '../src/events/follow-check.js';
import { handleFrame, type ServerFrame } from '../src/events/frames.js';
import { selectProtocol } from '../src/events/protocols.js';
import type { OutEvent } from '../src/events/envelope.js';
import type { EventHub, Subscription } from '../src/events/hub.js';
import {
  cursorAhead,
  endFrame,
  streamSink,
  type CloseReason,
  type SinkContext,
  type StreamError,
  type Transport,
} from '../src/events/sink.js';
import type { Metrics } from '../src/observability/metrics.js';
import type { SessionDeps } from '../src/sessions/mutate.js';
import type { ClientTokenRecord, ClientTokens } from '../src/store/client-tokens.js';
import { componentLog } from '../src/log.js';
import { watchToken, type TokenWatch } from '../src/plugins/auth.js';
import { TokenRate, tokenRateRefusal, type RateHit } from '../src/quotas/token-rate.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['session_not_found'] } as const satisfies RouteCodes;

export const streamQuery = z.strictObject({
  after: cursorParam.optional(),
  until: z
    .enum(['run_end'])
    .optional()
    .meta({
      description:
        '`run_end`: the stream ends (an `end` frame with reason `run_ended`, then close 1000) after the first ' +
        '`session.status` event after the cursor whose status is not `running`.',
    }),
});

/** The close code of each way a stream ends (the reason is the CloseReason itself). */
export const CLOSE_CODES: Record<CloseReason, number> = {
  session_deleted: 1000,
  shutting_down: 1001,
  store_unavailable: 1011,
  slow_reader: 1013,
  cursor_expired: 4410,
  token_expired: 4401,
  token_revoked: 4401,
  run_ended: 1000,
};

const PING_FRAME = JSON.stringify({ type: 'ping' });

/** Client frames waiting for their answer, per connection; more get `rate_limited` at once. */
const MAX_PENDING_FRAMES = 32;
/** After a close frame is queued, how long a peer that does not answer keeps its socket. */
const CLOSE_GRACE_MS = 10_000;

/**
 * GET /v1/sessions/:id/stream (WebSocket, spec §5).
 *
 * Refusals happen before the upgrade, as HTTP errors with the REST body: 401 `unauthorized` (the auth hook),
 * 404 `session_not_found` (also for another tenant's session), 400 `invalid_request` (a malformed `after`),
 * 400 `invalid_cursor` (an `after` past the newest event).
 * After the upgrade the server closes with 1013 (slow reader: reconnect with the last id), 4410
 * `cursor_expired` (after an error frame saying how to recover), 1000 `session_deleted`, 1001 `shutting_down`,
 * 1011 `store_unavailable`.
 */
const routes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  // Every open connection of this process. Pings: one timer for all of them (a timer per idle socket costs memory).
  // A peer that has not answered the previous ping (or sent anything) by the next one is gone: its `close` cleans up.
  const conns = new Map<WebSocket, WsConn>();
  const pinger = setInterval(() => {
    for (const c of conns.values()) {
      if (!c.alive) {
        c.socket.terminate();
        continue;
      }
      c.alive = false;
      c.socket.ping();
    }
  }, config.WS_PING_MS);
  pinger.unref();
  // Heartbeats browsers can see (they never see protocol pings): `{"type":"ping"}` to every socket not behind.
  const heartbeat = setInterval(() => {
    for (const socket of conns.keys())
      if (socket.readyState === socket.OPEN && socket.bufferedAmount === 0) socket.send(PING_FRAME);
  }, config.STREAM_HEARTBEAT_MS);
  heartbeat.unref();
  app.addHook('onClose', async () => {
    clearInterval(pinger);
    clearInterval(heartbeat);
  });

  // What every connection shares (the connection itself keeps only its own fields), and its socket's listeners: one
  // function each for all sockets (`this` is the socket), not closures per connection.
  const shared: StreamShared = {
    hub: app.eventsHub,
    metrics: app.metrics,
    deps: app.sessionDeps,
    clientTokens: app.clientTokens,
    log: componentLog(app.log, 'stream'),
    config,
    tokenRate:
      config.CLIENT_TOKEN_RATE_LIMIT_PER_MIN > 0
        ? new TokenRate(app.redis, config.CLIENT_TOKEN_RATE_LIMIT_PER_MIN)
        : null,
  };
  function onPong(this: WebSocket) {
    const c = conns.get(this);
    if (c) c.alive = true;
  }
  function onMessage(this: WebSocket, data: RawData, isBinary: boolean) {
    conns.get(this)?.frame(data, isBinary);
  }
  function onClose(this: WebSocket, code: number) {
    const c = conns.get(this);
    if (!c) return;
    conns.delete(this);
    c.closed(code);
  }
  function onError(this: WebSocket, err: Error) {
    conns.get(this)?.log.debug({ err, session: conns.get(this)?.sessionId }, 'websocket error');
    this.terminate();
  }

  const hub = app.eventsHub;

  // Browsers authenticate with `Sec-WebSocket-Protocol: bearer, <token>` and require the server to select one of
  // the offered protocols: select `bearer` (ws's default would pick the first offered, possibly the token).
  app.websocketServer.options.handleProtocols ??= selectProtocol;
  // The 101 answer carries the upgrade's request id as every other answer does (ws writes it, not Fastify).
  const upgradeIds = new WeakMap<IncomingMessage, string>();
  /** The upgrades of a deleted session's log (its follower resuming with a cursor): told from the check to the socket. */
  const deletedUpgrades = new WeakSet<IncomingMessage>();
  app.websocketServer.on('headers', (headers: string[], raw: IncomingMessage) => {
    const id = upgradeIds.get(raw);
    if (id) headers.push(`X-Request-Id: ${id}`);
  });

  app.get(
    '/v1/sessions/:id/stream',
    {
      websocket: true,
      config: { scope: 'read' },
      schema: {
        operationId: 'streamEvents',
        summary: 'The event stream over a WebSocket (replay after `after`, then live; client frames)',
        description:
          'A WebSocket upgrade (`Connection: Upgrade`, `Upgrade: websocket`). Browsers authenticate with the ' +
          'subprotocols `bearer, <key>`. The frames, close codes and resume rules are in docs/API.md §6.3. ' +
          'Refusals come before the upgrade, as HTTP errors.',
        tags: ['events'],
        params: sessionIdParam,
        querystring: streamQuery,
        response: {
          101: z.null().meta({ description: 'Switching Protocols: the WebSocket is open.' }),
          // 403 `origin_not_allowed`: an Origin outside CORS_ORIGINS.
          // 426 `upgrade_required`: a plain GET (not an upgrade).
          ...routeErrors(NOT_FOUND, 400, 401, 403, 404, 426, 429, 500, 503),
        },
      },
      // Runs before the upgrade: another tenant's or a missing session is an HTTP 404, never a socket; a cursor
      // past the newest event a 400 (both reads in one round trip, by auto-pipelining).
      preHandler: async (req) => {
        if (!req.ws)
          throw new HttpRefusal(
            'upgrade_required',
            'This route is a WebSocket: send an upgrade request (Connection: Upgrade, Upgrade: websocket).',
            undefined,
            { upgrade: 'websocket' },
          );
        upgradeIds.set(req.raw, req.id);
        const id = req.params.id;
        const after = parseCursor(req.query.after)!;
        const [{ deleted }, lastId] = await Promise.all([
          checkReadable(app.store, req.tenant, id, after),
          after === START ? null : hub.eventLog.lastId(id),
        ]);
        if (isAhead(after, lastId)) throw cursorAhead(after, lastId);
        if (deleted) deletedUpgrades.add(req.raw);
      },
      // A refused upgrade (an HTTP error answered on the raw socket) must release that socket: Node's HTTP server no
      // longer tracks it, and @fastify/websocket only destroys it when its own onRequest hook ran, which an
      // earlier hook that throws (the auth hook's 401) prevents. A successful upgrade never reaches onResponse.
      onResponse: async (req) => {
        if (req.headers.upgrade) req.raw.socket?.destroy();
      },
    },
    (socket: WebSocket, req) => {
      // The connection outlives the upgrade request, which nothing needs once the socket is open: keep a few of
      // its fields and let the rest go (request, response, their headers and logger were half of an idle
      // connection's memory). @fastify/websocket ties them to the connection in two places: the response holds the
      // raw socket (`assignSocket`), and its `error` listener on the WebSocket closes over request and reply.
      // Kept cast: `_httpMessage` (the response a socket is assigned to) is Node's own field, not in its types.
      const rawSocket = req.raw.socket as Socket & { _httpMessage?: ServerResponse | null };
      rawSocket._httpMessage?.detachSocket(rawSocket);
      socket.removeAllListeners('error');
      const c = new WsConn(shared, socket, {
        sessionId: req.params.id,
        tenant: req.tenant,
        token: req.clientToken,
        untilRunEnd: !!req.query.until,
        request_id: req.id,
      });
      conns.set(socket, c);
      socket.on('error', onError);
      socket.on('pong', onPong);
      socket.on('message', onMessage);
      socket.on('close', onClose);
      c.start(parseCursor(req.query.after)!, deletedUpgrades.has(req.raw));
    },
  );
};

/** What the connections of one service share. */
interface StreamShared {
  hub: EventHub;
  metrics: Metrics;
  deps: SessionDeps;
  clientTokens: ClientTokens;
  /** The `stream` component's logger; a connection's own child (with its `request_id`) is made when it first logs. */
  log: FastifyBaseLogger;
  config: Config;
  /** The client tokens' windows of mutating requests (src/plugins/ratelimit.ts): a token's frames count in them. */
  tokenRate: TokenRate | null;
}

/** A resolved promise: the client frame chain of every connection starts from it. */
const IDLE: Promise<void> = Promise.resolve();

/**
 * One open WebSocket: the transport its sink writes to (Transport), the sink's and the client frames' context, and
 * the connection's state. A class, so its behaviour lives on the prototype: thousands of idle connections each
 * keep only these fields (closures per connection, a logger per connection and a context object each for the sink
 * and the frames cost ~2 kB more each: docs/BENCHMARKS.md, B6).
 */
class WsConn implements Transport, SinkContext {
  /** Answered the last ping (or sent anything) since. */
  alive = true;
  private closing = false;
  /** The id of the last event written to this socket (the `end` frame's `last_event_id`). */
  private lastSent: string | null = null;
  private sub: Subscription | null = null;
  private watch: TokenWatch | null = null;
  /** Client frames run one at a time, in order. */
  private chain = IDLE;
  private pending = 0;
  private logger: FastifyBaseLogger | null = null;
  readonly sessionId: string;
  readonly tenant: string;
  readonly token: ClientTokenRecord | null;
  readonly untilRunEnd: boolean;
  private readonly requestId: string;
  /** When the socket opened (Date.now(), ms). */
  private readonly openedAt = Date.now();

  constructor(
    private readonly shared: StreamShared,
    readonly socket: WebSocket,
    opened: {
      sessionId: string;
      tenant: string;
      token: ClientTokenRecord | null;
      untilRunEnd: boolean;
      request_id: string;
    },
  ) {
    this.sessionId = opened.sessionId;
    this.tenant = opened.tenant;
    this.token = opened.token;
    this.untilRunEnd = opened.untilRunEnd;
    this.requestId = opened.request_id;
  }

  // ---- SinkContext and the frames' context: the shared parts ----
  get hub(): EventHub {
    return this.shared.hub;
  }
  get metrics(): Metrics {
    return this.shared.metrics;
  }
  get deps(): SessionDeps {
    return this.shared.deps;
  }
  get maxBuffered(): number {
    return this.shared.config.WS_MAX_BUFFER_BYTES;
  }
  get stallMs(): number {
    return this.shared.config.SLOW_READER_TIMEOUT_MS;
  }
  get tokenWatch(): TokenWatch | null {
    return this.watch;
  }
  /** The connection's logger (`component: stream`, its upgrade's `request_id`), made when it first logs. */
  get log(): FastifyBaseLogger {
    return (this.logger ??= this.shared.log.child({ request_id: this.requestId }));
  }

  /**
   * Subscribes to the session's events after `after`, and watches the client token it was opened with. `deleted`:
   * the session was deleted before (a follower resuming with its cursor; src/events/follow-check.ts).
   */
  start(after: string, deleted: boolean): void {
    const { metrics, config } = this.shared;
    metrics.streamsOpened.inc({ transport: 'ws' });
    metrics.streamConnections.inc({ transport: 'ws' });
    // A client token's connection ends with the token: at its expiry, at its `client_token.revoked` event (the
    // sink asks `tokenWatch`), or once it is found revoked. Made before the subscription, whose replay may hold it.
    this.watch = watchToken(this.shared.clientTokens, this.token, config.STREAM_HEARTBEAT_MS, (err) => {
      this.control({ type: 'error', ref: null, error: { code: err.code, message: err.message } });
      this.close(err instanceof TokenExpired ? 'token_expired' : 'token_revoked');
    });
    this.sub = this.hub.subscribe(this.sessionId, after, streamSink(this, this), this.tenant, deleted);
  }

  /**
   * The socket closed (either side): the connection's one line at info, as the access log writes one per request
   * (an open socket never reaches it): how long it was open and how it ended.
   */
  closed(code: number): void {
    this.shared.log.info(
      {
        request_id: this.requestId,
        route: '/v1/sessions/:id/stream',
        tenant: this.tenant,
        session: this.sessionId,
        ms: Date.now() - this.openedAt,
        close_code: code,
      },
      'stream closed',
    );
    this.metrics.streamConnections.dec({ transport: 'ws' });
    this.closing = true;
    this.sub?.close();
    this.watch?.stop();
  }

  /**
   * A frame of a client token's connection counts as a mutating request in the token's window
   * (CLIENT_TOKEN_RATE_LIMIT_PER_MIN, as the REST routes' `preHandler` in src/plugins/ratelimit.ts): past it, the
   * frame is answered `rate_limited` with `retry_after_s`. A Redis error lets it through, as there.
   */
  async admit(): Promise<void> {
    const { tokenRate, config } = this.shared;
    if (!this.token || !tokenRate) return;
    let hit: RateHit;
    try {
      hit = await tokenRate.hit(this.tenant, this.token.id);
    } catch {
      return;
    }
    const refused = tokenRateRefusal(hit, config.CLIENT_TOKEN_RATE_LIMIT_PER_MIN);
    if (refused) throw refused.error;
  }

  /** A client frame: run after the ones before it; a bad frame gets an error frame and the connection stays. */
  frame(data: RawData, isBinary: boolean): void {
    this.alive = true;
    if (isBinary) {
      return this.control({
        type: 'error',
        ref: null,
        error: { code: 'invalid_frame', message: 'Frames are JSON text.' },
      });
    }
    if (this.pending >= MAX_PENDING_FRAMES) {
      return this.control({
        type: 'error',
        ref: null,
        error: { code: 'rate_limited', message: 'Too many frames waiting for their answer.' },
      });
    }
    this.pending++;
    const text = data.toString();
    this.chain = this.chain.then(async () => {
      // Each frame of a client token's connection checks the token first: a revoked one ends the connection.
      const refused = this.watch ? await this.watch.check() : null;
      const out = refused ? null : await handleFrame(text, this);
      this.pending--;
      if (out) this.control(out);
    });
  }

  /**
   * An answer of the service's own (an ack, an error frame): held to WS_MAX_BUFFER_BYTES as events are (the sink's
   * check), or a client that sends frames and never reads would queue their answers without bound on an idle session.
   */
  private control(frame: ServerFrame): void {
    if (this.closing || this.socket.readyState !== this.socket.OPEN) return;
    if (this.socket.bufferedAmount > this.maxBuffered) {
      this.metrics.slowReaderCloses.inc({ transport: 'ws' });
      this.close('slow_reader');
      return;
    }
    this.socket.send(JSON.stringify(frame));
    // Its own answers count against its tenant's bound too, as events do (a client that sends frames on idle
    // sessions and never reads would hold its socket's bound on each of its tenant's streams).
    this.sub?.count();
  }

  // ---- Transport ----
  get kind(): 'ws' {
    return 'ws';
  }
  // Kept cast: ws keeps the TCP socket in its private `_socket` (not in its types); its write buffer says when to
  // wait for `drain`.
  private raw(): Socket | undefined {
    return (this.socket as WebSocket & { _socket?: Socket })._socket;
  }
  open(): boolean {
    return !this.closing && this.socket.readyState === this.socket.OPEN;
  }
  buffered(): number {
    return this.socket.bufferedAmount;
  }
  needsDrain(): Socket | null {
    const s = this.raw();
    return s?.writableNeedDrain ? s : null;
  }
  write(ev: OutEvent): void {
    this.lastSent = ev.id;
    // No extension negotiated (the server offers none): without extensions ws writes each frame whole and
    // synchronously, so a frame written straight to the socket never lands inside another; queued bytes still count
    // in `bufferedAmount` (the socket's).
    const s = this.raw();
    if (this.socket.extensions === '' && s) s.write(ev.wsWire());
    else this.socket.send(ev.wsFrame(), { binary: false });
  }
  cork(): void {
    this.raw()?.cork();
  }
  uncork(): void {
    this.raw()?.uncork();
  }
  error(error: StreamError): void {
    this.control({ type: 'error', ref: null, error });
  }
  close(reason: CloseReason): void {
    if (this.closing) return;
    this.closing = true;
    this.sub?.close();
    const socket = this.socket;
    // The end frame says whether anything more will come; a slow reader gets none (its queue is full).
    if (socket.readyState === socket.OPEN && reason !== 'slow_reader') {
      socket.send(JSON.stringify(endFrame(reason, this.lastSent)));
    }
    if (socket.readyState === socket.OPEN) socket.close(CLOSE_CODES[reason], reason);
    setTimeout(() => socket.terminate(), CLOSE_GRACE_MS).unref();
  }
}

export default routes;
