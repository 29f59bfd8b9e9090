import createFetchClient, { type Client } from 'openapi-fetch';
import { unwrap } from './answer.js';
import { NotFoundError } from './errors.js';
import { follow, type Event, type FollowOptions, type WebSocketConstructor } from './follow.js';
import { retryingFetch, type FetchLike, type RetryOptions } from './http.js';
import type { components, operations, paths } from './openapi.js';

/**
 * The typed client of the service (`toolrunner-sessions/client`), for Node and browsers alike (no Node-only
 * imports). `client.api` is the generated client of every operation (openapi-fetch over the types generated from
 * openapi.json); the methods below wrap the main ones, return the body, and throw ApiError subclasses carrying the
 * service's error codes, or a ConnectionError for a 2xx answer that is not the API's JSON (answer.ts). Plus what generation cannot give: `follow()` (the event stream over the WebSocket, resumed
 * across disconnects, exactly once), `waitFor()`, retries that honour Retry-After with an Idempotency-Key on every
 * POST, and `verifyWebhook()`.
 */

export type Session = components['schemas']['Session'];
/**
 * What a change a client token may make (a message, a decision, results, continue, cancel) answers: the session,
 * or to a client token without the `read` scope only its receipt (`id`, `status`, `revision`, times). With a tenant
 * key it is always the session: `isSession(answer)` narrows it.
 */
export type MutatedSession = components['schemas']['MutatedSession'];
export type SessionReceipt = components['schemas']['SessionReceipt'];

/** Whether a mutation's answer is the whole session (always, with a tenant key), not a client token's receipt. */
export const isSession = (s: MutatedSession): s is Session => 'params' in s;
export type SessionStatus = components['schemas']['SessionStatus'];
export type SessionList = components['schemas']['SessionList'];
export type EventPage = components['schemas']['EventPage'];
/** An event type, and the event of one type: `if (ev.type === 'session.status') ev.data.status` needs no cast. */
export type EventType = Event['type'];
export type EventOf<T extends EventType> = Extract<Event, { type: T }>;
/** A content block: narrow by `type` against the known ones (`KnownContentBlock`); newer types pass through. */
export type ContentBlock = components['schemas']['ContentBlock'];
export type KnownContentBlock = components['schemas']['KnownContentBlock'];
/** The SDK's stop reasons, or a newer string: switch on the known values and keep a default branch. */
export type StopReason = components['schemas']['StopReason'];
export type { ConnectionState, Event, FollowOptions, WebSocketConstructor, WebSocketLike } from './follow.js';
export type { RetryOptions } from './http.js';
export type { components, operations, paths } from './openapi.js';
export * from './errors.js';
export { verifyWebhook, WebhookVerificationError } from './webhooks.js';
export { isAfter } from './follow.js';

type JsonBody<Op extends keyof operations> = operations[Op] extends {
  requestBody?: { content: { 'application/json': infer B } };
}
  ? NonNullable<B>
  : never;
type Query<Op extends keyof operations> = operations[Op] extends { parameters: { query?: infer Q } }
  ? NonNullable<Q>
  : never;

export type CreateSessionBody = JsonBody<'createSession'>;
export type AddMessageBody = JsonBody<'addMessage'>;
export type DecideToolCallBody = JsonBody<'decideToolCall'>;
export type PutToolResultBody = JsonBody<'putToolResult'>;
export type SubmitToolResultsBody = JsonBody<'submitToolResults'>;
export type UpdateSessionBody = JsonBody<'updateSession'>;
export type RetrySessionBody = JsonBody<'retrySession'>;
export type ForkSessionBody = JsonBody<'forkSession'>;
export type CompactSessionBody = JsonBody<'compactSession'>;

export interface ClientOptions extends RetryOptions {
  /** Where the service is, e.g. `http://127.0.0.1:3000`. */
  baseUrl: string;
  /** A key of API_KEYS; omit for a service running without keys. */
  apiKey?: string | undefined;
  /** Default: the global fetch. */
  fetch?: FetchLike | undefined;
  /**
   * Default: the global WebSocket (browsers, Node ≥ 22). On Node 20 pass `WebSocket` from the `ws` package.
   * The key travels as the subprotocols `bearer, <key>`, so it may hold letters, digits and `-._~!#$%&'*+^|` only.
   */
  WebSocket?: WebSocketConstructor | undefined;
}

/** Per request: `If-Match` (the session's revision) and a chosen `Idempotency-Key` (POST). */
export interface MutationOptions {
  ifMatch?: number | undefined;
  idempotencyKey?: string | undefined;
  signal?: AbortSignal | undefined;
}

export interface WaitOptions {
  /** Gives up with a WaitTimeoutError after this long (default: never). */
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

export class WaitTimeoutError extends Error {
  override readonly name = 'WaitTimeoutError';
}

export class SessionsClient {
  /** Every operation of the OpenAPI document, typed (openapi-fetch): `client.api.GET('/v1/tools')`. */
  readonly api: Client<paths>;
  private readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly WebSocket: WebSocketConstructor | undefined;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.WebSocket = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    const base = options.fetch ?? ((req: Request) => globalThis.fetch(req));
    this.api = createFetchClient<paths>({
      baseUrl: this.baseUrl,
      fetch: retryingFetch(base, options),
      headers: this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {},
    });
  }

  /** A mutation's request options: its headers (`If-Match`, `Idempotency-Key`) and its signal. */
  private options(o: MutationOptions): { headers: Record<string, string>; signal: AbortSignal | null } {
    const headers: Record<string, string> = {};
    if (o.ifMatch !== undefined) headers['if-match'] = `"${o.ifMatch}"`;
    if (o.idempotencyKey !== undefined) headers['idempotency-key'] = o.idempotencyKey;
    return { headers, signal: o.signal ?? null };
  }

  createSession(body: CreateSessionBody, o: MutationOptions = {}): Promise<Session> {
    return unwrap(this.api.POST('/v1/sessions', { body, ...this.options(o) }), 'session');
  }

  listSessions(query: Query<'listSessions'> = {}): Promise<SessionList> {
    return unwrap(this.api.GET('/v1/sessions', { params: { query } }), 'page');
  }

  getSession(id: string, o: { signal?: AbortSignal | undefined } = {}): Promise<Session> {
    return unwrap(
      this.api.GET('/v1/sessions/{id}', { params: { path: { id } }, signal: o.signal ?? null }),
      'session',
    );
  }

  deleteSession(id: string, o: MutationOptions = {}) {
    return unwrap(this.api.DELETE('/v1/sessions/{id}', { params: { path: { id } }, ...this.options(o) }));
  }

  addMessage(id: string, body: AddMessageBody, o: MutationOptions = {}): Promise<MutatedSession> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/messages', {
        params: { path: { id } },
        body,
        ...this.options(o),
      }),
      'session',
    );
  }

  decideToolCall(
    id: string,
    toolUseId: string,
    body: DecideToolCallBody,
    o: MutationOptions = {},
  ): Promise<MutatedSession> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/tool-calls/{tool_use_id}', {
        params: { path: { id, tool_use_id: toolUseId } },
        body,
        ...this.options(o),
      }),
      'session',
    );
  }

  putToolResult(
    id: string,
    toolUseId: string,
    body: PutToolResultBody,
    o: MutationOptions = {},
  ): Promise<MutatedSession> {
    return unwrap(
      this.api.PUT('/v1/sessions/{id}/tool-results/{tool_use_id}', {
        params: { path: { id, tool_use_id: toolUseId } },
        body,
        ...this.options(o),
      }),
      'session',
    );
  }

  submitToolResults(
    id: string,
    body: SubmitToolResultsBody,
    o: MutationOptions = {},
  ): Promise<MutatedSession> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/tool-results', {
        params: { path: { id } },
        body,
        ...this.options(o),
      }),
      'session',
    );
  }

  updateSession(id: string, body: UpdateSessionBody, o: MutationOptions = {}): Promise<Session> {
    return unwrap(
      this.api.PATCH('/v1/sessions/{id}', { params: { path: { id } }, body, ...this.options(o) }),
      'session',
    );
  }

  continueSession(id: string, o: MutationOptions = {}): Promise<MutatedSession> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/continue', {
        params: { path: { id } },
        body: {},
        ...this.options(o),
      }),
      'session',
    );
  }

  retrySession(id: string, body: RetrySessionBody = {}, o: MutationOptions = {}): Promise<Session> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/retry', { params: { path: { id } }, body, ...this.options(o) }),
      'session',
    );
  }

  cancelSession(id: string, o: MutationOptions = {}): Promise<MutatedSession> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/cancel', {
        params: { path: { id } },
        body: {},
        ...this.options(o),
      }),
      'session',
    );
  }

  resumeSession(id: string, o: MutationOptions = {}): Promise<Session> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/resume', {
        params: { path: { id } },
        body: {},
        ...this.options(o),
      }),
      'session',
    );
  }

  forkSession(id: string, body: ForkSessionBody, o: MutationOptions = {}): Promise<Session> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/fork', { params: { path: { id } }, body, ...this.options(o) }),
      'session',
    );
  }

  /** Compacts the history: scheduled after the turn in flight (running), or at once (idle, failed). */
  compactSession(id: string, body: CompactSessionBody = {}, o: MutationOptions = {}): Promise<Session> {
    return unwrap(
      this.api.POST('/v1/sessions/{id}/compact', {
        params: { path: { id } },
        body,
        ...this.options(o),
      }),
      'session',
    );
  }

  /** The history; with `{include: 'compacted'}` also what each compaction summarized, oldest first. */
  listMessages(id: string, query: Query<'listMessages'> = {}) {
    return unwrap(this.api.GET('/v1/sessions/{id}/messages', { params: { path: { id }, query } }), 'page');
  }

  /**
   * A page of the sessions the session's sub-agent calls created, oldest first; each child's `parent` names its
   * call. Follow `next_cursor` while `has_more` (a page may hold fewer than `limit`).
   */
  listChildren(id: string, query: Query<'listChildren'> = {}) {
    return unwrap(this.api.GET('/v1/sessions/{id}/children', { params: { path: { id }, query } }), 'page');
  }

  listIterations(id: string) {
    return unwrap(this.api.GET('/v1/sessions/{id}/iterations', { params: { path: { id } } }), 'page');
  }

  getIteration(id: string, n: number) {
    return unwrap(this.api.GET('/v1/sessions/{id}/iterations/{n}', { params: { path: { id, n } } }));
  }

  /** A page of the event log (JSON); `follow()` is the live alternative. */
  async listEvents(id: string, query: Query<'listEvents'> = {}): Promise<EventPage> {
    const page = await unwrap(
      this.api.GET('/v1/sessions/{id}/events', {
        params: { path: { id }, query },
        headers: { accept: 'application/json' },
        parseAs: 'json',
      }),
      'page',
    );
    // With `Accept: application/json` the answer is the JSON page, never the SSE text.
    return page as EventPage;
  }

  listTools() {
    return unwrap(this.api.GET('/v1/tools'));
  }

  /**
   * The session's events after `options.after` (every retained event without it), then live, over the WebSocket:
   * reconnects by itself and resumes after the last event it yielded, so each event comes exactly once. Ends after
   * `session.deleted`; `break` out of the loop (or abort `options.signal`) to stop earlier.
   */
  follow(sessionId: string, options: FollowOptions = {}): AsyncGenerator<Event, void, undefined> {
    const WebSocket = this.WebSocket;
    if (!WebSocket) {
      throw new TypeError(
        'No WebSocket implementation: pass `WebSocket` (e.g. from the `ws` package) to the client.',
      );
    }
    return follow(
      {
        baseUrl: this.baseUrl,
        apiKey: this.apiKey,
        WebSocket,
        // The events route refuses what the upgrade refused (the key, the session, the cursor), as JSON.
        check: async (id, after) => {
          await unwrap(
            this.api.GET('/v1/sessions/{id}/events', {
              params: { path: { id }, query: { ...(after !== undefined ? { after } : {}), limit: 1 } },
              headers: { accept: 'application/json' },
              parseAs: 'json',
              signal: options.signal ?? null,
            }),
            'page',
          );
        },
      },
      sessionId,
      options,
    );
  }

  /**
   * Resolves with the session once its status is one of `status` (or `status(session)` holds): at once if it
   * already is, else when a `session.status` event says so (the session is read again then, and returned if it
   * still matches). Rejects with a NotFoundError if the session is deleted, a WaitTimeoutError after
   * `timeoutMs`.
   */
  async waitFor(
    sessionId: string,
    status: SessionStatus | SessionStatus[] | ((s: Session) => boolean),
    options: WaitOptions = {},
  ): Promise<Session> {
    const wanted = typeof status === 'function' ? status : (s: Session) => [status].flat().includes(s.status);
    const first = await this.getSession(sessionId, options.signal ? { signal: options.signal } : {});
    if (wanted(first)) return first;
    // A signal aborted already fires no `abort` event: refused here, before the listener below.
    options.signal?.throwIfAborted();
    const stop = new AbortController();
    const onAbort = () => stop.abort(options.signal?.reason);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    const timer =
      options.timeoutMs !== undefined
        ? setTimeout(
            () =>
              stop.abort(new WaitTimeoutError(`session ${sessionId}: no match in ${options.timeoutMs} ms`)),
            options.timeoutMs,
          )
        : undefined;
    try {
      // From the start of the log: a status change between the read above and the subscription is not missed.
      // Status events older than the session read above are skipped by revision.
      for await (const ev of this.follow(sessionId, { signal: stop.signal })) {
        if (ev.type === 'session.deleted') {
          throw deleted(sessionId);
        }
        if (ev.type !== 'session.status' || (ev.revision !== null && ev.revision <= first.revision)) continue;
        const s = await this.getSession(sessionId, { signal: stop.signal });
        if (wanted(s)) return s;
      }
      throw deleted(sessionId);
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
    }
  }
}

/** What `waitFor` throws when the session it waits for is deleted: the 404 a read of it now answers. */
const deleted = (sessionId: string) =>
  new NotFoundError(404, { code: 'session_not_found', message: `Session ${sessionId} was deleted.` });

/** `new SessionsClient(options)`. */
export const createClient = (options: ClientOptions) => new SessionsClient(options);
export { ToolWorker, type ToolWorkerOptions, type WorkerTool, type ToolTask } from './tool-worker.js';
