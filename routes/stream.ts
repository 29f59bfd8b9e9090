import type { FastifyBaseLogger } from 'fastify';
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { WebSocket } from 'ws';
import { z } from 'zod';
import type { Config } from '../src/config.js';
import { sessionIdParam } from '../src/schemas.js';
import { routeErrors, type RouteCodes } from '../src/openapi/responses.js';
import { HttpRefusal, TokenExpired } from '../src/plugins/error-status.js';
import { START, isCursor, parseCursor, placeCursor } from '../src/events/cursor.js';
import { handleFrame, type ServerFrame } from '../src/events/frames.js';
import { selectProtocol } from '../src/events/protocols.js';
import { cursorAhead, endFrame, streamSink, type CloseReason } from '../src/events/sink.js';
import { componentLog } from '../src/log.js';
import { watchToken } from '../src/plugins/auth.js';
import type { ClientTokenRecord } from '../src/store/client-tokens.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['session_not_found'] } as const satisfies RouteCodes;

export const streamQuery = z.object({
  after: z
    .string()
    .max(64)
    .refine(isCursor, 'not an event id: give the `id` of an event (`<ms>-<seq>`), or 0 for the start')
    .optional(),
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
  // Pings: one timer for all connections (a timer per idle socket costs memory). A peer that has not answered the
  // previous ping (or sent anything) by the next one is gone.
  const alive = new Map<WebSocket, boolean>();
  const pinger = setInterval(() => {
    for (const [socket, ok] of alive) {
      if (!ok) {
        alive.delete(socket);
        socket.terminate();
        continue;
      }
      alive.set(socket, false);
      socket.ping();
    }
  }, config.WS_PING_MS);
  pinger.unref();
  // Heartbeats browsers can see (they never see protocol pings): `{"type":"ping"}` to every socket not behind.
  const heartbeat = setInterval(() => {
    for (const socket of alive.keys())
      if (socket.readyState === socket.OPEN && socket.bufferedAmount === 0) socket.send(PING_FRAME);
  }, config.STREAM_HEARTBEAT_MS);
  heartbeat.unref();
  app.addHook('onClose', async () => {
    clearInterval(pinger);
    clearInterval(heartbeat);
  });

  const hub = app.eventsHub;

  // Browsers authenticate with `Sec-WebSocket-Protocol: bearer, <token>` and require the server to select one of
  // the offered protocols: select `bearer` (ws's default would pick the first offered, possibly the token).
  app.websocketServer.options.handleProtocols ??= selectProtocol;

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
        const id = req.params.id;
        const after = parseCursor(req.query.after)!;
        const [, lastId] = await Promise.all([
          app.store.loadFor(req.tenant, id),
          after === START ? null : hub.eventLog.lastId(id),
        ]);
        if (after !== START && placeCursor(after, null, lastId) === 'ahead') throw cursorAhead(after, lastId);
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
      const id = req.params.id;
      const tenant = req.tenant;
      const log = componentLog(req.log, 'stream');
      const after = parseCursor(req.query.after)!;
      // Kept cast: `_httpMessage` (the response a socket is assigned to) is Node's own field, not in its types.
      const rawSocket = req.raw.socket as Socket & { _httpMessage?: ServerResponse | null };
      rawSocket._httpMessage?.detachSocket(rawSocket);
      socket.removeAllListeners('error');
      socket.on('error', (err) => {
        log.debug({ err, session: id }, 'websocket error');
        socket.terminate();
      });
      openStream(socket, { id, tenant, log, after, token: req.clientToken, untilRunEnd: !!req.query.until });
    },
  );

  function openStream(
    socket: WebSocket,
    opened: {
      id: string;
      tenant: string;
      log: FastifyBaseLogger;
      after: string;
      token: ClientTokenRecord | null;
      untilRunEnd: boolean;
    },
  ) {
    const { id, tenant, log, after, token, untilRunEnd } = opened;
    /** The id of the last event written to this socket (the `end` frame's `last_event_id`). */
    let lastSent: string | null = null;
    app.metrics.streamsOpened.inc({ transport: 'ws' });
    app.metrics.streamConnections.inc({ transport: 'ws' });

    let closing = false;
    const closeWith = (reason: CloseReason) => {
      if (closing) return;
      closing = true;
      sub.close();
      // The end frame says whether anything more will come; a slow reader gets none (its queue is full).
      if (socket.readyState === socket.OPEN && reason !== 'slow_reader') {
        socket.send(JSON.stringify(endFrame(reason, lastSent)));
      }
      if (socket.readyState === socket.OPEN) socket.close(CLOSE_CODES[reason], reason);
      setTimeout(() => socket.terminate(), CLOSE_GRACE_MS).unref();
    };
    const control = (frame: ServerFrame) => {
      if (!closing && socket.readyState === socket.OPEN) socket.send(JSON.stringify(frame));
    };

    alive.set(socket, true);
    socket.on('pong', () => alive.set(socket, true));

    // Kept cast: ws keeps the TCP socket in its private `_socket` (not in its types); its write buffer says when to
    // wait for `drain`.
    const raw = () => (socket as WebSocket & { _socket?: Socket })._socket;
    // No extension negotiated (the server offers none): frames go out as built, uncompressed.
    const plain = socket.extensions === '';
    const sink = streamSink(
      {
        kind: 'ws',
        open: () => !closing && socket.readyState === socket.OPEN,
        buffered: () => socket.bufferedAmount,
        needsDrain() {
          const s = raw();
          return s?.writableNeedDrain ? s : null;
        },
        write(ev) {
          lastSent = ev.id;
          // Without extensions ws writes each frame whole and synchronously, so a frame written straight to the
          // socket never lands inside another; queued bytes still count in `bufferedAmount` (the socket's).
          const s = raw();
          if (plain && s) s.write(ev.wsWire());
          else socket.send(ev.wsFrame(), { binary: false });
        },
        cork: () => raw()?.cork(),
        uncork: () => raw()?.uncork(),
        error: (error) => control({ type: 'error', ref: null, error }),
        close: closeWith,
      },
      {
        sessionId: id,
        hub,
        metrics: app.metrics,
        log,
        maxBuffered: config.WS_MAX_BUFFER_BYTES,
        stallMs: config.SLOW_READER_TIMEOUT_MS,
        untilRunEnd,
      },
    );
    const sub = hub.subscribe(id, after, sink);
    // A client token's connection ends with the token: at its expiry, or once it is found revoked.
    const watch = watchToken(app.clientTokens, token, config.STREAM_HEARTBEAT_MS, (err) => {
      control({ type: 'error', ref: null, error: { code: err.code, message: err.message } });
      closeWith(err instanceof TokenExpired ? 'token_expired' : 'token_revoked');
    });

    // Client frames run one at a time, in order; a bad frame gets an error frame and the connection stays.
    let chain: Promise<void> = Promise.resolve();
    let pending = 0;
    const ctx = { tenant, sessionId: id, sessions: app.sessions, log, token };
    socket.on('message', (data, isBinary) => {
      alive.set(socket, true);
      if (isBinary) {
        return control({
          type: 'error',
          ref: null,
          error: { code: 'invalid_frame', message: 'Frames are JSON text.' },
        });
      }
      if (pending >= MAX_PENDING_FRAMES) {
        return control({
          type: 'error',
          ref: null,
          error: { code: 'rate_limited', message: 'Too many frames waiting for their answer.' },
        });
      }
      pending++;
      const text = data.toString();
      chain = chain.then(async () => {
        // Each frame of a client token's connection checks the token first: a revoked one ends the connection.
        const refused = await watch.check();
        const out = refused ? null : await handleFrame(text, ctx);
        pending--;
        if (out) control(out);
      });
    });
    socket.on('close', () => {
      app.metrics.streamConnections.dec({ transport: 'ws' });
      closing = true;
      alive.delete(socket);
      sub.close();
      watch.stop();
    });
  }
};

export default routes;
