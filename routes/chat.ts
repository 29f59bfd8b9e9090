/**
 * The AI SDK's chat routes (spec §7.3, docs/API.md "Use it from a chat UI"): POST /v1/chat (DefaultChatTransport's
 * `sendMessages`), GET /v1/chat/:id/stream (its `reconnectToStream`), GET /v1/chat/:id/messages (the history as
 * UIMessage[]). The chat id is a session id: a client creates the session first (POST /v1/sessions) and uses its
 * id as the chat's `id`; an unknown id is 404 `session_not_found`. The streams are the session's event log
 * translated by src/chat/chunks.ts; the mutations are the REST routes' own (src/sessions/).
 *
 * Scopes (client tokens, spec §7.2): each route names the scope it needs in its `config.scope`; POST /v1/chat needs
 * `message` for a user message, `decide` for approval responses, `results` for tool outputs (`needScope` below),
 * and streams the run only to a caller that holds `read` (`withoutRun` below).
 *
 * What a post does to the session is src/chat/post.ts; what its answer streams and what its Idempotency-Key keeps of
 * it, src/chat/answer.ts; the translation of the log, src/chat/chunks.ts. Here: the three routes, and the one stream
 * answer they share (its start, its quota), kept beside them.
 */
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { z } from 'zod';
import type { Config } from '../src/config.js';
import { sessionIdParam } from '../src/schemas.js';
import { payloadTooLarge, uiMessageList, routeErrors, type RouteCodes } from '../src/openapi/responses.js';
import { requiredAction } from '../src/engine/status.js';
import type { Subscription } from '../src/events/hub.js';
import { streamSink, type CloseReason } from '../src/events/sink.js';
import { ChatTranslator, type UIChunk } from '../src/chat/chunks.js';
import { awaitsAgentsOnly } from '../src/chat/event-shapes.js';
import { keptSteps, runMessageId, toUIMessages } from '../src/chat/history.js';
import { chatAskOf, chatBody } from '../src/chat/request.js';
import { denials } from '../src/chat/denials.js';
import { MAX_UI_MESSAGES, chatRecord } from '../src/chat/record.js';
import { postChat, type Poster } from '../src/chat/post.js';
import { agentsOf, postedAnswer, replayedAnswer, streamRecord, validatedOf } from '../src/chat/answer.js';
import { defineChatCommands, runStartCursor } from '../src/chat/run-start.js';
import type { SessionState } from '../src/store/session-state.js';
import { actorOf, readsSession, requireScope, watchToken } from '../src/plugins/auth.js';
import { TokenExpired } from '../src/plugins/error-status.js';
import type { ClientScope } from '../src/store/client-tokens.js';
import { requestLine } from '../src/plugins/access-log.js';
import { ifMatchHeader, keyed, resolveIfMatch } from './mutations.js';

/** The 404 of this file's routes names one thing (src/openapi/responses.ts `routeErrors`). */
const NOT_FOUND = { 404: ['session_not_found'] } as const satisfies RouteCodes;

const sse = {
  description: 'The AI SDK UI message stream (SSE `data:` chunks, then `data: [DONE]`).',
  content: {
    'text/event-stream': {
      schema: z.string().meta({ description: 'UI message chunks; see docs/API.md "Use it from a chat UI".' }),
    },
  },
};

/**
 * The scope a part of the request needs beyond the route's `config.scope` (any of message, decide, results): 403
 * `scope_denied` for a client token without it (spec §7.2); tenant keys hold every scope.
 */
function needScope(req: FastifyRequest, scope: ClientScope): void {
  requireScope(req.clientToken, scope);
}

/**
 * The stream's first chunks: after `start`, the answers to approvals decided elsewhere and the results delivered
 * meanwhile. When nothing runs (a decision left others undecided, a message queued while the session waits), the
 * stream says what the session waits for now, and ends.
 */
function headOf(t: ChatTranslator, status: Record<string, unknown> | null): UIChunk[] {
  const head = [...t.start(), ...t.decidedFirst(), ...t.deliveredFirst()];
  return status === null ? head : [...head, ...t.event('session.status', status)];
}

/**
 * The answer of POST /v1/chat to a client token without `read` (spec §7.2: the run's stream is `read`'s, posting
 * is `message`'s, `decide`'s, `results`'): its parts are posted as for any caller, and the stream carries nothing
 * of the run — `start` (naming only the assistant message the client's own request continued) and `finish`, then
 * `[DONE]`: a valid UI message stream that the AI SDK ends at once. The translator is done: nothing else is sent.
 */
function withoutRun(t: ChatTranslator): UIChunk[] {
  const head = [...t.start(), { type: 'finish' }];
  t.done = true;
  return head;
}

const routes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  const hub = app.eventsHub;
  const tags = ['chat'];
  defineChatCommands(app.redis);

  /**
   * Streams the run after `after` as UI message chunks, after their head (`status`: the session's when it runs
   * nothing); ends after the translator's last chunk. A caller that may not see the run gets the head of nothing
   * (`withoutRun`): decided here, so that no answer can stream the run to a client token without `read`.
   */
  function stream(
    req: FastifyRequest,
    reply: FastifyReply,
    id: string,
    after: string,
    t: ChatTranslator,
    status: Record<string, unknown> | null,
  ) {
    // HEAD (GET /v1/chat/:id/stream answers it): the stream's headers, and no stream. Node sends nothing of a HEAD
    // answer before its end, so a stream would answer nothing while it held a subscription outside the stream
    // quotas (which count the GET route's streams).
    if (req.method === 'HEAD') return headAnswer(reply);
    const head = readsSession(req.clientToken) ? headOf(t, status) : withoutRun(t);
    const res = openStream(req, reply);
    if (res === null) return;
    pipeRun(req, res, id, after, t, head);
  }

  /** The answer to a HEAD: the stream's headers, and an empty body. */
  function headAnswer(reply: FastifyReply): void {
    void reply
      .type('text/event-stream; charset=utf-8')
      .headers({ 'cache-control': 'no-cache, no-transform', 'x-vercel-ai-ui-message-stream': 'v1' })
      .send();
  }

  /**
   * Takes the response from Fastify and opens the stream: its headers (those set on the reply so far, then the
   * stream's), and the connection counted until it closes, when the request's line is logged (Fastify logs none for
   * a hijacked reply). Null when the client is gone already: nothing is opened, nothing counted.
   */
  function openStream(req: FastifyRequest, reply: FastifyReply): ServerResponse | null {
    reply.hijack();
    // The client went away while the request was handled: its response's 'close' has fired already, so the
    // handlers set on it (here and in pipeRun) would never run and the heartbeat, the subscription and the connection
    // gauge would leak.
    if (reply.raw.destroyed) return null;
    const res = reply.raw;
    const headers: OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(reply.getHeaders()))
      if (value !== undefined) headers[name] = value;
    res.writeHead(200, {
      ...headers,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      'x-vercel-ai-ui-message-stream': 'v1',
    });
    app.metrics.streamsOpened.inc({ transport: 'sse' });
    app.metrics.streamConnections.inc({ transport: 'sse' });
    res.once('close', () => {
      app.metrics.streamConnections.dec({ transport: 'sse' });
      requestLine(req, reply);
    });
    return res;
  }

  /**
   * Writes `head` to the open stream `res`, then the run after `after` as the hub's sink delivers it, translated by
   * `t`, until its end: the translator's last chunk, the client token's end, the sink's close (a slow reader is cut,
   * any other close is said as the stream's error) or the client going away. Every end stops the heartbeat, the
   * token watch and the subscription once; each but a slow reader's and the client's own ends with `[DONE]`.
   */
  function pipeRun(
    req: FastifyRequest,
    res: ServerResponse,
    id: string,
    after: string,
    t: ChatTranslator,
    head: UIChunk[],
  ) {
    const write = (chunks: UIChunk[]) => {
      for (const c of chunks) res.write(`data: ${JSON.stringify(c)}\n\n`);
    };
    let done = false;
    let sub: Subscription | undefined;
    const heartbeat = setInterval(() => {
      if (!done && res.writableLength <= config.WS_MAX_BUFFER_BYTES) res.write(': ping\n\n');
    }, config.STREAM_HEARTBEAT_MS);
    // A client token's stream ends with the token, as the events stream does: at its expiry, at its
    // `client_token.revoked` event (the sink asks the watch), or once found revoked (checked every
    // STREAM_HEARTBEAT_MS); the UI gets the refusal as the stream's error.
    const watch = watchToken(app.clientTokens, req.clientToken, config.STREAM_HEARTBEAT_MS, (err) => {
      if (!done && !res.destroyed) write(t.fail(`${err.code}: ${err.message}`));
      end(err instanceof TokenExpired ? 'token_expired' : 'token_revoked');
    });
    const end = (reason: CloseReason | 'finished') => {
      if (done) return;
      done = true;
      clearInterval(heartbeat);
      watch.stop();
      sub?.close();
      if (reason === 'slow_reader') return void res.destroy();
      if (reason !== 'finished') write(t.fail(`The stream ended: ${reason}.`));
      res.write('data: [DONE]\n\n');
      while (res.writableCorked > 0) res.uncork();
      res.end();
    };
    res.on('close', () => {
      done = true;
      clearInterval(heartbeat);
      watch.stop();
      sub?.close();
    });
    write(head);
    if (t.done) return end('finished');
    const sink = streamSink(
      {
        kind: 'sse',
        open: () => !done && !res.destroyed,
        buffered: () => res.writableLength,
        needsDrain: () => (res.writableNeedDrain ? res : null),
        write(ev) {
          const { data, revision } = JSON.parse(ev.json) as { data: unknown; revision: number | null };
          write(t.event(ev.type, data, ev.id, revision));
          if (t.done) end('finished');
        },
        cork: () => res.cork(),
        uncork: () => res.uncork(),
        error(err) {
          if (!done && !res.destroyed) write(t.fail(err.message));
        },
        close: end,
      },
      {
        sessionId: id,
        hub,
        metrics: app.metrics,
        log: req.log,
        maxBuffered: config.WS_MAX_BUFFER_BYTES,
        stallMs: config.SLOW_READER_TIMEOUT_MS,
        tokenWatch: watch,
      },
    );
    try {
      sub = hub.subscribe(id, after, sink, req.tenant);
    } catch (err) {
      req.log.warn({ err }, 'chat stream refused');
      end('shutting_down');
    }
  }

  /**
   * Who posts (src/chat/post.ts `Poster`): the request's tenant and actor, its If-Match (against `s`, the session as
   * read), and the scope check each part of the body needs, which notes each scope in `scopes` (a replay needs them).
   */
  async function posterOf(req: FastifyRequest, s: SessionState, scopes: ClientScope[]): Promise<Poster> {
    return {
      deps: app.sessionDeps,
      tenant: req.tenant,
      by: actorOf(req.clientToken),
      need: (scope) => {
        needScope(req, scope);
        scopes.push(scope);
      },
      ifMatch: await resolveIfMatch(req, async () => s.revision),
    };
  }

  app.post(
    '/v1/chat',
    {
      // Any of the three: each part of the body needs its own (needScope); the session is the body's `id`.
      config: { scope: ['message', 'decide', 'results'], sessionIn: 'body' },
      schema: {
        operationId: 'chat',
        summary: "The AI SDK's chat endpoint (useChat / DefaultChatTransport)",
        description:
          'Body as `DefaultChatTransport` sends it: `id` (a session id), `messages` (UIMessage[]; only the newest ' +
          'is read), `trigger`, `messageId`. A user message is posted to the session (as POST …/messages); tool ' +
          'approval responses and client tool outputs in an assistant message become decisions and results. ' +
          'The answer is the run as a UI message stream until it stops or needs the client; to a client token ' +
          'without `read`, only `start` and `finish` (nothing of the run).',
        tags,
        body: chatBody,
        headers: ifMatchHeader,
        response: {
          200: sse,
          ...routeErrors(NOT_FOUND, 400, 401, 404, 409, 412, 413, 415, 422, 429, 500, 503),
          413: payloadTooLarge(
            "the user turn a message joins, or the pending step's tool results with those given, would be larger than MAX_TURN_BYTES",
          ),
        },
      },
    },
    async (req, reply) => {
      const ask = chatAskOf(req.body);
      const s = await app.store.loadFor(req.tenant, ask.id);
      const replay = req.streamReplay;
      if (replay) {
        // The same Idempotency-Key and body again: nothing is posted twice; the first answer streams again, to a
        // caller that holds the scopes the first one needed.
        for (const scope of replay.scopes) needScope(req, scope);
        const again = replayedAnswer(ask, s, replay);
        return stream(req, reply, ask.id, again.after, again.t, again.status);
      }
      const scopes: ClientScope[] = [];
      const posted = await postChat(await posterOf(req, s, scopes), s, ask, {
        log: hub.eventLog,
        keyed: keyed(app.sessionDeps, req),
        seesRun: readsSession(req.clientToken),
      });
      // An Idempotency-Key keeps where this answer streams from, so the same request streams it again.
      await app.keepStreamed(req, streamRecord(posted, scopes));
      const answer = postedAnswer(ask, posted);
      // The revision the request's last write made (none when nothing was written now: a message posted already).
      if (posted.wrote !== undefined) reply.header('etag', `"${posted.wrote}"`);
      stream(req, reply, ask.id, answer.after, answer.t, answer.status);
    },
  );

  app.get(
    '/v1/chat/:id/stream',
    {
      config: { scope: 'read' },
      schema: {
        operationId: 'resumeChatStream',
        summary: "Resume the current run's UI message stream from its start",
        description:
          '204 when no run is active (idle, failed, or waiting for the client; a run waiting only for its ' +
          'sub-agents is active). The `start` chunk names the assistant message as GET /v1/chat/:id/messages does.',
        tags,
        params: sessionIdParam,
        response: {
          200: sse,
          204: z.null().meta({ description: 'No run is active.' }),
          ...routeErrors(NOT_FOUND, 400, 401, 404, 500, 503),
        },
      },
    },
    async (req, reply) => {
      const id = req.params.id;
      const s = await app.store.loadFor(req.tenant, id);
      const agents = agentsOf(s);
      // A run waiting only for its sub-agents goes on without the client: it is active.
      const agentsPause = awaitsAgentsOnly(requiredAction(s.status, s.pending), agents);
      const active = s.status === 'running' || agentsPause;
      const start = active ? await runStartCursor(app.redis, id, config.EVENT_LOG_MAX, agentsPause) : null;
      if (start === null) return reply.code(204).send(null);
      // The history, and before it (after a compaction inside the run) the kept messages back to the run's user
      // turn: the message the run continues is named as the page names it, from its first reply (one whose start is
      // past the read's bounds, record.ts, from the first message read, as the page names it).
      const record = await chatRecord(app.store, id, 1);
      const messageId = runMessageId(id, record.messages, record.base, record.afterUser);
      // After a retry the replay starts at the retry's run: the message's steps before it are the history's.
      const earlier =
        start.kept === undefined
          ? []
          : keptSteps(
              id,
              record.messages,
              record.base,
              record.older + start.kept,
              messageId,
              agents,
              await denials(app.store, id, record.messages, null),
              record.afterUser,
            );
      const t = new ChatTranslator(messageId, [], {
        agents,
        validated: validatedOf(s),
        pausedBefore: start.run,
        midRun: start.midRun,
        // Replies before the replay's start: the log's start of the message was trimmed away.
        repliedBefore: start.midRun,
        earlier,
      });
      stream(req, reply, id, start.cursor, t, null);
    },
  );

  app.get(
    '/v1/chat/:id/messages',
    {
      config: { scope: 'read' },
      schema: {
        operationId: 'listChatMessages',
        summary: 'The history as UIMessage[] (the newest 1000)',
        tags,
        params: sessionIdParam,
        response: { 200: uiMessageList, ...routeErrors(NOT_FOUND, 400, 401, 404, 500, 503) },
      },
    },
    async (req) => {
      const s = await app.store.loadFor(req.tenant, req.params.id);
      // The live history and, after compactions, the newest messages they moved out of it (bounded: record.ts).
      const { messages, base, afterUser } = await chatRecord(app.store, s.id);
      const denied = await denials(app.store, s.id, messages, s.pending);
      const action = requiredAction(s.status, s.pending);
      return toUIMessages(s.id, messages, base, action, agentsOf(s), denied, afterUser).slice(
        -MAX_UI_MESSAGES,
      );
    },
  );
};

export default routes;
