import type { RedisClient } from './lua-commands.js';

/**
 * Redis keys. Every key of one session carries the hash tag `{<id>}`, so a Redis Cluster keeps them in one slot
 * and a Lua script may touch them all. The tenant index and the run queue are global keys, written in their own
 * commands (never in a session's script) for the same reason.
 *
 * Prefix: the names here are unprefixed; the clients of src/plugins/redis.ts prepend REDIS_KEY_PREFIX (default
 * `trs:`) to every key of every command and to the KEYS of every script (ioredis's `keyPrefix`), so Lua scripts take
 * every key they touch as KEYS (never build one from ARGV or from another key) and no code
 * lists keys by pattern (SCAN/KEYS would not be prefixed). The prefix holds no `{`/`}`, so the hash tags stay the
 * first braces of each key. Pub/sub channels are not keys: their names go through {@link channelName}.
 */
export const sessionKeys = (id: string) => ({
  /**
   * HASH: the session's fields (status, revision, params, policies, usage, pending tool step, …; `ev_bytes`: the log's
   * size; `ev_last`: its newest id, lua/includes/event-log.lua; `bytes`: what its writes added, storage-quota.ts;
   * `ct_bytes`: its client tokens' records in `bytes`).
   */
  meta: metaKey(id),
  /** LIST: the message history, one JSON message per element. Append-only except a bounded edit of its tail. */
  msgs: `s:{${id}}:m`,
  /** LIST: iteration records (JSON), element n-1 is iteration n. */
  iters: `s:{${id}}:i`,
  /** LIST: queued follow-ups, each the JSON of a content-block array (EncodedBlocks), joined into the next user turn. */
  queue: `s:{${id}}:q`,
  /** STREAM: the event log; entry ids are the clients' cursors. */
  events: eventsKey(id),
  /** STRING `<owner>:<fence>` with a TTL: who runs the session now. */
  lease: `s:{${id}}:l`,
  /** LIST: what compactions summarized, one segment `{"at_iteration", "messages"}` (JSON) each, oldest first. */
  compacted: `s:{${id}}:c`,
  /**
   * LIST: a create's history pushed in parts before the create's write, with an expiry; the write renames it to
   * `msgs` (apply-8.lua `stage`). A prefix: each attempt appends its own random name, so two creates of one id
   * never mix their parts.
   */
  stage: `s:{${id}}:st:`,
  /**
   * STRING: a kept segment too large for one script to build or push (Store `apply`, `compact.staged`): appended in
   * parts before the compaction's write, with an expiry, which that write removes; its element of `compacted` is then
   * a stub naming it (apply-8.lua `compact`). A prefix: each attempt appends its own random name. Listed in the meta
   * field `seg_keys`; deleted by the session's delete, in its script (destroy-11.lua).
   */
  segment: `s:{${id}}:cs:`,
  /** HASH: the session's client tokens (src/store/client-tokens.ts), deleted with the session. */
  tokens: `s:{${id}}:ct`,
  /**
   * STRING: a deleted session's tenant, kept as long as its event log (destroy-11.lua): whose the log is once the
   * meta hash is gone, so its tenant's followers may resume to its `session.deleted` (src/store/store.ts `deletedFor`),
   * and the webhooks' fan-out delivers it (src/webhooks/outbox.ts `sessionTenant`).
   */
  gone: `s:{${id}}:g`,
  /**
   * HASH: what a delete of the session owes its tenant's storage count (destroy-11.lua: field its `session.deleted`
   * event's id, value `<bytes>:<tenant>`), from its script until the bytes are given back (store.ts `destroy`, or any
   * replica's sweep of its mark should its process die between: `giveBackLeft`); expires GIVE_BACK_TTL_MS after it
   * (storage-quota.ts).
   */
  giveBack: `s:{${id}}:b`,
});

export type SessionKeys = ReturnType<typeof sessionKeys>;

/** `sessionKeys(id).meta` alone. */
function metaKey(id: string): string {
  return `s:{${id}}`;
}

/** `sessionKeys(id).events` alone. */
function eventsKey(id: string): string {
  return `s:{${id}}:e`;
}

/**
 * The two keys an append of stream events touches (`sessionKeys(id)`'s meta and events), without building the six
 * others: the stream relays' flush names them once per session and flush, i.e. about once per streamed delta.
 */
export const eventLogKeys = (id: string): readonly [meta: string, events: string] => [
  metaKey(id),
  eventsKey(id),
];

/** ZSET of a tenant's session ids scored by creation time (ms). */
export const tenantIndexKey = (tenant: string) => `t:{${tenant}}:sessions`;

/** ZSET of sessions with status `running`, scored by the time (ms) after which any replica may claim the run. */
export const RUNS_KEY = 'runs:due';

/**
 * The name a pub/sub channel has on `redis`: the key prefix (which ioredis puts on keys, not on channels), then
 * `name`. Services with different prefixes on one Redis never hear each other's channels. Every SUBSCRIBE and
 * PUBLISH, and every channel given to a script, is named by it; {@link unprefixedChannel} undoes it for a message.
 */
export const channelName = (redis: RedisClient, name: string): string =>
  (redis.options.keyPrefix ?? '') + name;

/** The name of a channel a message came on, without `redis`'s prefix; null for a channel of another prefix. */
export function unprefixedChannel(redis: RedisClient, channel: string): string | null {
  const prefix = redis.options.keyPrefix ?? '';
  return channel.startsWith(prefix) ? channel.slice(prefix.length) : null;
}

/** Pub/sub channel on which cancel/interrupt/delete reach the replica running a session. */
export const controlChannel = (id: string) => `ctl:{${id}}`;

/** Pub/sub channel told the id of a session's newest event, so relays read the log only when it grew. */
export const eventsChannel = (id: string) => `ev:{${id}}`;

/**
 * ZSET of a tenant's sessions that hold a slot among its active runs (TENANT_MAX_ACTIVE_RUNS), scored by the time
 * (ms) the slot was taken. Hash tag: the tenant (one slot of a Redis Cluster per tenant).
 */
export const tenantRunsKey = (tenant: string) => `q:{${tenant}}:runs`;

export const idempotencyKey = (tenant: string, key: string) => `idem:{${tenant}}:${key}`;

/** The session id of a control channel's name, or null for another channel. */
export const sessionOfControlChannel = (channel: string): string | null =>
  channel.startsWith('ctl:{') && channel.endsWith('}') ? channel.slice(5, -1) : null;

/** The session id of an events channel's name, or null for another channel. */
export const sessionOfEventsChannel = (channel: string): string | null =>
  channel.startsWith('ev:{') && channel.endsWith('}') ? channel.slice(4, -1) : null;

/** The memory tool's files of a tenant (hash tag: the tenant, so both keys share a Cluster slot). */
export const memoryKeys = (tenant: string) => ({
  /** HASH: path (relative to /memories) → content. */
  files: `mem:{${tenant}}:f`,
  /** STRING: the UTF-8 bytes of all the tenant's files, kept by the scripts that write them. */
  bytes: `mem:{${tenant}}:b`,
});
