import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { OutgoingHttpHeaders } from 'node:http';
import { z } from 'zod';
import { intQuery } from '../src/int-param.js';
import type { Config } from '../src/config.js';
import { badRequest } from '../src/errors.js';
import { sessionIdParam } from '../src/schemas.js';
import { eventPage, routeErrors, type RouteCodes } from '../src/openapi/responses.js';
import { START, cursorParam, isAhead, parseCursor, placeCursor } from '../src/events/cursor.js';
import { OutEvent, sseData } from '../src/events/envelope.js';
import type { Subscription } from '../src/events/hub.js';
import {
  cursorAhead,
  cursorExpired,
  endFrame,
  streamSink,
  type CloseReason,
  wantsEventStream,
} from '../src/events/sink.js';
import { checkReadable } from '../src/events/follow-check.js';
import { watchToken } from '../src/plugins/auth.js';
import { TokenExpired } from '../src/plugins/error-status.js';
import { requestLine } from '../src/plugins/access-log.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['session_not_found'] } as const satisfies RouteCodes;

const SSE_TYPE = 'text/event-stream; charset=utf-8';

const eventsHeaders = z.looseObject({
  'last-event-id': z.string().optional().meta({
    description:
      'SSE: resume after this event id (what EventSource sends when it reconnects); wins over `after`.',
  }),
});

export const eventsQuery = z.strictObject({
  after: cursorParam.optional(),
  limit: intQuery(1, 1000, 100),
  until: z
    .enum(['run_end'])
    .optional()
    .meta({
      description:
        'SSE only. `run_end`: the stream ends (an `end` record with reason `run_ended`) after the first ' +
        '`session.status` event after the cursor whose status is not `running`.',
    }),
});

/**
 * GET /v1/sessions/:id/events
 * - JSON pages: `{data: [envelope…], next_cursor, has_more}`; `next_cursor` is the id of the page's last event (or
 *   the `after` given when the page is empty, so a poller keeps its place); a page holds at most `limit` events and
 *   REPLAY_PAGE_BYTES of them (one larger event comes alone); 410 `cursor_expired` when `after` was trimmed away,
 *   400 `invalid_cursor` when it is past the newest event.
 * - `Accept: text/event-stream`: SSE (`id:` event id, `event:` type, `data:` envelope), replaying after
 *   `Last-Event-ID` (or `after`), then live; `: ping` comments every STREAM_HEARTBEAT_MS (15 s); the stream ends after
 *   `session.deleted`, after an `event: error` (cursor_expired, store_unavailable), or when the client reads too
 *   slowly (src/events/sink.ts; the response is dropped, and EventSource reconnects with Last-Event-ID by itself).
 *   A cursor past the newest event is refused before the stream starts (400 `invalid_cursor`).
 * - Both read a deleted session's log, while it is kept, for its tenant's reader that resumes with a cursor
 *   (src/events/follow-check.ts): the rest of the log, `session.deleted` last; 404 without a cursor.
 */
const routes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  const hub = app.eventsHub;
  const maxBuffered = config.WS_MAX_BUFFER_BYTES;

  app.get(
    '/v1/sessions/:id/events',
    {
      config: { scope: 'read' },
      schema: {
        operationId: 'listEvents',
        summary: 'The event log: JSON pages, or Server-Sent Events',
        description:
          'JSON: a page of events after `after` (`next_cursor` is the id of its last event). With ' +
          '`Accept: text/event-stream`: Server-Sent Events (`id:` the event id, `event:` its type, `data:` the ' +
          'envelope), replaying after `Last-Event-ID` or `after`, then live; the protocol is in docs/API.md §6.2.',
        tags: ['events'],
        params: sessionIdParam,
        querystring: eventsQuery,
        headers: eventsHeaders,
        response: {
          200: {
            description: 'A page of events (JSON), or the event stream (SSE).',
            content: {
              'application/json': { schema: eventPage },
              'text/event-stream': {
                schema: z.string().meta({ description: 'Server-Sent Events; see docs/API.md §6.2.' }),
              },
            },
          },
          ...routeErrors(NOT_FOUND, 400, 401, 404, 410, 500, 503),
        },
      },
    },
    async (req, reply) => {
      const id = req.params.id;
      const sse = wantsEventStream(req.headers.accept);

      if (!sse) {
        const after = parseCursor(req.query.after)!;
        const limit = req.query.limit;
        await checkReadable(app.store, req.tenant, id, after);
        const page = await hub.eventLog.page(id, after, { count: limit, maxBytes: hub.pageLimits.maxBytes });
        app.metrics.replayPages.inc({ source: 'poll' });
        const place = placeCursor(after, page);
        if (place === 'expired') {
          throw cursorExpired(id, {
            cursor: after,
            first_event_id: page.firstId,
            last_event_id: page.lastId,
          });
        }
        if (place === 'ahead') throw cursorAhead(after, page.lastId);
        const events = page.events.map((e) => new OutEvent(id, e));
        const next = events.length
          ? events[events.length - 1]!.id
          : req.query.after !== undefined
            ? after
            : null;
        // The envelopes are already JSON text: the body is assembled, not re-serialised.
        return reply
          .type('application/json; charset=utf-8')
          .send(
            `{"data":[${events.map((e) => e.json).join(',')}],"next_cursor":${JSON.stringify(next)},` +
              `"has_more":${page.more}}`,
          );
      }

      const header = req.headers['last-event-id'];
      const rawCursor = typeof header === 'string' && header.trim() !== '' ? header.trim() : req.query.after;
      const after = parseCursor(rawCursor);
      if (after === null) throw badRequest('Last-Event-ID is not an event id.', { 'last-event-id': header });
      // Both in one round trip (auto-pipelining): the session, and the newest event for a cursor past it (400
      // before the stream starts: EventSource gives up on an HTTP error, where it would reconnect with the same
      // Last-Event-ID forever after an `event: error`).
      const [{ deleted }, lastId] = await Promise.all([
        checkReadable(app.store, req.tenant, id, after),
        after === START ? null : hub.eventLog.lastId(id),
      ]);
      if (isAhead(after, lastId)) throw cursorAhead(after, lastId);
      // HEAD (every GET answers it): the stream's headers, and no stream. Node sends nothing of a HEAD answer before
      // its end, so a stream would answer nothing while it held a subscription outside the stream quotas (which
      // count the GET route's streams).
      if (req.method === 'HEAD')
        return reply.type(SSE_TYPE).header('cache-control', 'no-cache, no-transform').send('');

      reply.hijack();
      // The client went away while the session was read: its response's 'close' has fired already, so the handler
      // below would never run and the heartbeat, the subscription and the connection gauge would leak.
      if (reply.raw.destroyed) return;
      const res = reply.raw;
      // The headers set on the reply so far (CORS, rate limit, …), as Node takes them: none is unset.
      const headers: OutgoingHttpHeaders = {};
      for (const [name, value] of Object.entries(reply.getHeaders()))
        if (value !== undefined) headers[name] = value;
      res.writeHead(200, {
        ...headers,
        'content-type': SSE_TYPE,
        'cache-control': 'no-cache, no-transform',
        connection: 'keep-alive',
        'x-accel-buffering': 'no',
      });
      res.write('retry: 2000\n\n');
      app.metrics.streamsOpened.inc({ transport: 'sse' });
      app.metrics.streamConnections.inc({ transport: 'sse' });
      res.once('close', () => {
        app.metrics.streamConnections.dec({ transport: 'sse' });
        requestLine(req, reply);
      });

      let done = false;
      /** The id of the last event written (the `end` record's `last_event_id`). */
      let lastSent: string | null = null;
      const heartbeat = setInterval(() => {
        if (!done && res.writableLength <= maxBuffered) res.write(': ping\n\n');
      }, config.STREAM_HEARTBEAT_MS);
      // A client token's stream ends with the token: at its expiry, at its `client_token.revoked` event (the sink
      // asks the watch), or once it is found revoked.
      const watch = watchToken(app.clientTokens, req.clientToken, config.STREAM_HEARTBEAT_MS, (err) => {
        if (!done && !res.destroyed)
          res.write(
            `event: error\n${sseData(JSON.stringify({ error: { code: err.code, message: err.message } }))}\n`,
          );
        end(err instanceof TokenExpired ? 'token_expired' : 'token_revoked');
      });
      const end = (reason: CloseReason) => {
        if (done) return;
        done = true;
        clearInterval(heartbeat);
        watch.stop();
        sub.close();
        // A slow reader's response is dropped (nothing more is queued for it); any other end is a clean one, whose
        // last record says whether anything more will come.
        if (reason === 'slow_reader') res.destroy();
        else {
          if (!res.destroyed)
            res.write(`event: end\n${sseData(JSON.stringify(endFrame(reason, lastSent)))}\n`);
          // Ending while corked (inside a batch of the hub) loses the corked writes on Node 24: flush them first.
          while (res.writableCorked > 0) res.uncork();
          res.end();
        }
      };
      const sink = streamSink(
        {
          kind: 'sse',
          open: () => !done && !res.destroyed,
          buffered: () => res.writableLength,
          needsDrain: () => (res.writableNeedDrain ? res : null),
          write: (ev) => {
            lastSent = ev.id;
            return res.write(ev.sseRecord());
          },
          cork: () => res.cork(),
          uncork: () => res.uncork(),
          error(error) {
            if (!done && !res.destroyed) res.write(`event: error\n${sseData(JSON.stringify({ error }))}\n`);
          },
          close: end,
        },
        {
          sessionId: id,
          hub,
          metrics: app.metrics,
          log: req.log,
          maxBuffered,
          stallMs: config.SLOW_READER_TIMEOUT_MS,
          untilRunEnd: req.query.until === 'run_end',
          tokenWatch: watch,
        },
      );
      let sub: Subscription;
      try {
        sub = hub.subscribe(id, after, sink, req.tenant, deleted);
      } catch (err) {
        // Only while the process shuts down.
        req.log.warn({ err }, 'event stream refused');
        done = true;
        clearInterval(heartbeat);
        watch.stop();
        res.end();
        return;
      }
      res.on('close', () => {
        done = true;
        clearInterval(heartbeat);
        watch.stop();
        sub.close();
      });
    },
  );
};

export default routes;
