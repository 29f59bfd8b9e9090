import createFetchClient, { defaultPathSerializer, type Client } from 'openapi-fetch';
import { unwrap } from './answer.js';
import { NotFoundError } from './errors.js';
import { follow, type Event, type FollowOptions, type WebSocketConstructor } from './follow.js';
import { idempotencyKey, retryingFetch, type FetchLike, type RetryOptions } from './http.js';
import type { components, operations, paths } from './openapi.js';

/**
 * The typed client of the service (`toolrunner-sessions/client`), for Node and browsers alike (no Node-only
 * imports). `client.api` is the generated client of every operation (openapi-fetch over the types generated from
 * openapi.json); the methods below wrap the main ones, return the body, and throw ApiError subclasses carrying the
 * service's error codes, or a ConnectionError for a 2xx answer that is not the API's JSON (answer.ts). Plus what generation cannot give: `follow()` (the event stream over the WebSocket, resumed
 * across disconnects, exactly once), `waitFor()`, retries that honour Retry-After with an Idempotency-Key on every
 * POST, and `verifyWebhook()`.
 *
 * Over 400 lines: one short method per route of the API, all of one class (`SessionsClient`, the one surface a user
 * learns); each is a line or two over `client.api`, and the logic they share (answers, retries, following) lives in
 * answer.ts, http.ts and follow.ts.
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
/** A whole new history: `{messages}` (`replaceMessages` takes the list). */
export type ReplaceMessagesBody = JsonBody<'replaceSessionMessages'>;
export type CreateWebhookBody = JsonBody<'createWebhook'>;
export type UpdateWebhookBody = JsonBody<'updateWebhook'>;
export type PutToolBody = JsonBody<'putTool'>;
export type ClaimToolTasksBody = JsonBody<'claimToolTasks'>;
export type SubmitToolTaskResultBody = JsonBody<'submitToolTaskResult'>;
export type PutMcpServerBody = JsonBody<'putMcpServer'>;
export type CreateClientTokenBody = JsonBody<'createClientToken'>;
export type CreateScheduleBody = JsonBody<'createSchedule'>;
export type UpdateScheduleBody = JsonBody<'updateSchedule'>;

type Schemas = components['schemas'];
/** A webhook endpoint; `CreatedWebhook` also carries its `secret` (shown once, at the create). */
export type Webhook = Schemas['Webhook'];
export type CreatedWebhook = Schemas['CreatedWebhook'];
export type WebhookList = Schemas['WebhookList'];
export type DeletedWebhook = Schemas['DeletedWebhook'];
export type DeliveryList = Schemas['DeliveryList'];
export type TestDelivery = Schemas['TestDelivery'];
export type MemoryFileList = Schemas['MemoryFileList'];
export type MemoryFile = Schemas['MemoryFile'];
export type DeletedMemoryFile = Schemas['DeletedMemoryFile'];
export type ToolList = Schemas['ToolList'];
export type ListedTool = Schemas['ListedTool'];
/** A tenant tool's definition (`runner` `worker` or `http`), as registered. */
export type TenantTool = Schemas['TenantTool'];
/** `getTool`: the tenant's tool of that name, else the one `listTools` lists (a server's, memory, an MCP server's). */
export type ToolByName = Schemas['ToolByName'];
export type DeletedTool = Schemas['DeletedTool'];
export type ClaimedToolTasks = Schemas['ClaimedToolTasks'];
export type ToolTaskLease = Schemas['ToolTaskLease'];
export type ToolTaskResultAccepted = Schemas['ToolTaskResultAccepted'];
export type McpServer = Schemas['McpServer'];
export type McpServerList = Schemas['McpServerList'];
export type DeletedMcpServer = Schemas['DeletedMcpServer'];
/** A client token: `token` (`ct_…`) is shown in this answer only. */
export type ClientToken = Schemas['ClientToken'];
export type DeletedClientToken = Schemas['DeletedClientToken'];
export type Schedule = Schemas['Schedule'];
export type ScheduleList = Schemas['ScheduleList'];
export type DeletedSchedule = Schemas['DeletedSchedule'];
export type UsageDays = Schemas['UsageDays'];

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

/** A POST that creates (nothing to match a revision against): its `Idempotency-Key` and signal. */
export type PostOptions = Pick<MutationOptions, 'idempotencyKey' | 'signal'>;
/** A change of a tenant resource with a revision (PUT, PATCH, DELETE): `If-Match` (its `revision`) and signal. */
export type ChangeOptions = Pick<MutationOptions, 'ifMatch' | 'signal'>;
/** A request that takes no header: its signal. */
export interface SignalOptions {
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
      pathSerializer: refusingDotSegments,
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

  /** Replaces the whole history (`idle`, `failed`, or reviewing a turn or tool results); the session goes `idle`. */
  replaceMessages(
    id: string,
    messages: ReplaceMessagesBody['messages'],
    o: ChangeOptions = {},
  ): Promise<Session> {
    return unwrap(
      this.api.PUT('/v1/sessions/{id}/messages', {
        params: { path: { id } },
        body: { messages },
        ...this.options(o),
      }),
      'session',
    );
  }

  /** Every tool a session of the tenant may name: the server's, its MCP servers', its own. */
  listTools(): Promise<ToolList> {
    return unwrap(this.api.GET('/v1/tools'), 'page');
  }

  // Tenant tools (run by a ToolWorker, or an HTTP endpoint of yours).

  /**
   * Registers (201) or replaces (200) the tenant tool `name`; `ifMatch`: the tool's revision. Sent with an
   * `Idempotency-Key` (a random one unless `o` gives one), as a POST is: an http runner's `secret` is shown once, and a
   * retry of a PUT whose answer was lost gets that answer again, secret included, not a replace's without it.
   */
  putTool(
    name: string,
    body: PutToolBody,
    o: ChangeOptions & Pick<MutationOptions, 'idempotencyKey'> = {},
  ): Promise<TenantTool> {
    const keyed = { ...o, idempotencyKey: o.idempotencyKey ?? idempotencyKey() };
    return unwrap(
      this.api.PUT('/v1/tools/{name}', { params: { path: { name } }, body, ...this.options(keyed) }),
    );
  }

  getTool(name: string): Promise<ToolByName> {
    return unwrap(this.api.GET('/v1/tools/{name}', { params: { path: { name } } }));
  }

  deleteTool(name: string, o: ChangeOptions = {}): Promise<DeletedTool> {
    return unwrap(this.api.DELETE('/v1/tools/{name}', { params: { path: { name } }, ...this.options(o) }));
  }

  // Tool tasks: the worker protocol (`ToolWorker` runs it for you).

  /** A long poll: the calls leased to this worker, or none after `wait_ms`. Abort `signal` to give it up. */
  claimToolTasks(body: ClaimToolTasksBody, o: PostOptions = {}): Promise<ClaimedToolTasks> {
    return unwrap(this.api.POST('/v1/tool-tasks/claim', { body, ...this.options(o) }));
  }

  /** Extends a claimed task's lease (409 `task_lease_lost` once it is no longer this worker's). */
  heartbeatToolTask(id: string, o: PostOptions = {}): Promise<ToolTaskLease> {
    return unwrap(
      this.api.POST('/v1/tool-tasks/{id}/heartbeat', {
        params: { path: { id } },
        body: {},
        ...this.options(o),
      }),
    );
  }

  submitToolTaskResult(
    id: string,
    body: SubmitToolTaskResultBody,
    o: PostOptions = {},
  ): Promise<ToolTaskResultAccepted> {
    return unwrap(
      this.api.POST('/v1/tool-tasks/{id}/result', { params: { path: { id } }, body, ...this.options(o) }),
    );
  }

  // The tenant's MCP servers.

  /** Adds (201) or replaces (200) the MCP server `name`; `ifMatch`: its revision. */
  putMcpServer(name: string, body: PutMcpServerBody, o: ChangeOptions = {}): Promise<McpServer> {
    return unwrap(
      this.api.PUT('/v1/mcp-servers/{name}', { params: { path: { name } }, body, ...this.options(o) }),
    );
  }

  listMcpServers(): Promise<McpServerList> {
    return unwrap(this.api.GET('/v1/mcp-servers'), 'page');
  }

  /** One MCP server (its header values redacted). */
  getMcpServer(name: string): Promise<McpServer> {
    return unwrap(this.api.GET('/v1/mcp-servers/{name}', { params: { path: { name } } }));
  }

  deleteMcpServer(name: string, o: ChangeOptions = {}): Promise<DeletedMcpServer> {
    return unwrap(
      this.api.DELETE('/v1/mcp-servers/{name}', { params: { path: { name } }, ...this.options(o) }),
    );
  }

  // Webhooks.

  /** A new endpoint; its `secret` (for `verifyWebhook`) is in this answer only. */
  createWebhook(body: CreateWebhookBody, o: PostOptions = {}): Promise<CreatedWebhook> {
    return unwrap(this.api.POST('/v1/webhooks', { body, ...this.options(o) }));
  }

  listWebhooks(): Promise<WebhookList> {
    return unwrap(this.api.GET('/v1/webhooks'), 'page');
  }

  getWebhook(id: string): Promise<Webhook> {
    return unwrap(this.api.GET('/v1/webhooks/{id}', { params: { path: { id } } }));
  }

  /** Changes the fields given (`url`, `events`, `description`, `disabled`); `ifMatch`: its revision. */
  updateWebhook(id: string, body: UpdateWebhookBody, o: ChangeOptions = {}): Promise<Webhook> {
    return unwrap(
      this.api.PATCH('/v1/webhooks/{id}', { params: { path: { id } }, body, ...this.options(o) }),
    );
  }

  deleteWebhook(id: string, o: ChangeOptions = {}): Promise<DeletedWebhook> {
    return unwrap(this.api.DELETE('/v1/webhooks/{id}', { params: { path: { id } }, ...this.options(o) }));
  }

  /** The endpoint's recent delivery attempts. */
  listWebhookDeliveries(id: string, query: Query<'listWebhookDeliveries'> = {}): Promise<DeliveryList> {
    return unwrap(this.api.GET('/v1/webhooks/{id}/deliveries', { params: { path: { id }, query } }), 'page');
  }

  /** Queues a `webhook.test` delivery to the endpoint. */
  testWebhook(id: string, o: PostOptions = {}): Promise<TestDelivery> {
    return unwrap(
      this.api.POST('/v1/webhooks/{id}/test', { params: { path: { id } }, body: {}, ...this.options(o) }),
    );
  }

  // Memory: the memory tool's files of the tenant, by their path relative to /memories (`notes/today.md`).

  listMemory(): Promise<MemoryFileList> {
    return unwrap(this.api.GET('/v1/memory'), 'page');
  }

  /**
   * One file. The path is sent as one URL segment (`/` escaped); one with a `.` or `..` segment is refused (a
   * rejected TypeError) before anything is sent.
   */
  async getMemoryFile(path: string): Promise<MemoryFile> {
    return unwrap(this.api.GET('/v1/memory/{path}', { params: { path: { path: memoryPath(path) } } }));
  }

  /** Deletes one file (not a directory). The path is checked and sent as `getMemoryFile`'s. */
  async deleteMemoryFile(path: string): Promise<DeletedMemoryFile> {
    return unwrap(this.api.DELETE('/v1/memory/{path}', { params: { path: { path: memoryPath(path) } } }));
  }

  // Client tokens: one session's access for a browser.

  /** A token for one session with `scopes`; its `token` is in this answer only. */
  createClientToken(body: CreateClientTokenBody, o: PostOptions = {}): Promise<ClientToken> {
    return unwrap(this.api.POST('/v1/client-tokens', { body, ...this.options(o) }));
  }

  /** Revokes a client token at once. */
  deleteClientToken(id: string, o: SignalOptions = {}): Promise<DeletedClientToken> {
    return unwrap(
      this.api.DELETE('/v1/client-tokens/{id}', { params: { path: { id } }, ...this.options(o) }),
    );
  }

  // Schedules: sessions created on a cron or at a time.

  createSchedule(body: CreateScheduleBody, o: PostOptions = {}): Promise<Schedule> {
    return unwrap(this.api.POST('/v1/schedules', { body, ...this.options(o) }));
  }

  /** A page of the schedules; follow `next_cursor` while `has_more`. */
  listSchedules(query: Query<'listSchedules'> = {}): Promise<ScheduleList> {
    return unwrap(this.api.GET('/v1/schedules', { params: { query } }), 'page');
  }

  getSchedule(id: string): Promise<Schedule> {
    return unwrap(this.api.GET('/v1/schedules/{id}', { params: { path: { id } } }));
  }

  /** Changes the fields given (`paused`, `cron`, `at`, `session`, …); `ifMatch`: its revision. */
  updateSchedule(id: string, body: UpdateScheduleBody, o: ChangeOptions = {}): Promise<Schedule> {
    return unwrap(
      this.api.PATCH('/v1/schedules/{id}', { params: { path: { id } }, body, ...this.options(o) }),
    );
  }

  deleteSchedule(id: string, o: ChangeOptions = {}): Promise<DeletedSchedule> {
    return unwrap(this.api.DELETE('/v1/schedules/{id}', { params: { path: { id } }, ...this.options(o) }));
  }

  /** A page of the sessions the schedule created, newest fire first. */
  listScheduleRuns(id: string, query: Query<'listScheduleRuns'> = {}): Promise<SessionList> {
    return unwrap(this.api.GET('/v1/schedules/{id}/runs', { params: { path: { id }, query } }), 'page');
  }

  /** A page of the schedule's own events (`schedule.fired`, `schedule.skipped`, …), oldest first. */
  listScheduleEvents(id: string, query: Query<'listScheduleEvents'> = {}): Promise<EventPage> {
    return unwrap(this.api.GET('/v1/schedules/{id}/events', { params: { path: { id }, query } }), 'page');
  }

  /** Tokens and cost per UTC day, `from`..`to` (`YYYY-MM-DD`; default: today). */
  getUsage(query: Query<'getUsage'> = {}): Promise<UsageDays> {
    return unwrap(this.api.GET('/v1/usage', { params: { query } }), 'page');
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

/**
 * Path parameters as openapi-fetch writes them (each value escaped with encodeURIComponent, so a `/` in it stays in
 * its segment), except that a value `.` or `..` throws before anything is sent: the URL would resolve it as a dot
 * segment and the request reach another route (`DELETE /v1/tools/..` is `DELETE /v1/`).
 */
function refusingDotSegments(pathname: string, params: Record<string, unknown>): string {
  for (const [name, value] of Object.entries(params)) {
    if (value === '.' || value === '..') {
      throw new TypeError(`the path parameter ${name} cannot be ${JSON.stringify(value)}`);
    }
  }
  return defaultPathSerializer(pathname, params);
}

/**
 * A memory file's path as the routes take it: relative to /memories (a leading `/` dropped), without a `.` or `..`
 * segment (which throws: the service refuses them too, and none may come near the URL). openapi-fetch escapes the
 * whole path, `/` included, so it is one segment of the URL and cannot reach another route.
 */
function memoryPath(path: string): string {
  const relative = path.replace(/^\/+/, '');
  if (relative.split('/').some((segment) => segment === '.' || segment === '..')) {
    throw new TypeError(`a memory path has no "." or ".." segment: ${JSON.stringify(path)}`);
  }
  return relative;
}

/** What `waitFor` throws when the session it waits for is deleted: the 404 a read of it now answers. */
const deleted = (sessionId: string) =>
  new NotFoundError(404, { code: 'session_not_found', message: `Session ${sessionId} was deleted.` });

/** `new SessionsClient(options)`. */
export const createClient = (options: ClientOptions) => new SessionsClient(options);
export { ToolWorker, type ToolWorkerOptions, type WorkerTool, type ToolTask } from './tool-worker.js';
