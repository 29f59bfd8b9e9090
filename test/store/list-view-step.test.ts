/**
 * A list page (`GET /v1/sessions`, a schedule's runs) reads each session's view, which shows the pending step of a
 * `requires_action` session (`required_action`: its calls' inputs, up to BODY_LIMIT each once edited at approval, and
 * its results, up to MAX_TURN_BYTES together). list-view-1.lua read `pending` and every `result:*` field inside the
 * script: each value copied into Redis's Lua and out again, while Redis served no other tenant, for each such
 * session of each page. list-view-fields-1.lua names the step's fields; the list reads their values with a plain
 * HMGET, with the revision that says they are of the script's moment (else the session is read whole, once).
 * Here on a private Redis: the commands the script runs (MONITOR's `lua` lines), what Redis sends, and the view
 * against the session's whole hash.
 */
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { SessionIndex } from '../../src/store/session-index.js';
import { sessionKeys } from '../../src/store/keys.js';
import type { RedisClient } from '../../src/store/lua-commands.js';
import { pendingFields, type PendingStep } from '../../src/store/pending.js';
import { decodeFields } from '../../src/store/session-state.js';
import { sessionView } from '../../src/sessions/view.js';
import { monitorRedis } from '../helpers/redis-monitor.js';
import { storeRedisForSuite } from '../helpers/redis.js';
import { megabyteStep } from '../helpers/pending-step.js';

const ID = 'ses_listviewstep';
const TENANT = 'acme';
const MB = 1_000_000;

/** The session's index member time: its `created_at`. */
const CREATED = 1_000;

const fields = {
  id: ID,
  tenant: TENANT,
  status: 'requires_action',
  revision: '12',
  iteration: '3',
  params: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 1024 }),
  tools: JSON.stringify(['lookup', 'fetch', 'ask']),
  metadata: JSON.stringify({ team: 'blue' }),
  u_in: '120',
  u_st_web_search: '2',
  msg_count: '6',
  created_at: String(CREATED),
  updated_at: '2000',
};

/**
 * A step waiting for a decision on `toolu_3` (its view: `approve_tool_calls`), after two calls approved with 1 MB
 * edited inputs, the first with its 1 MB result in.
 */
const bigStep = (): PendingStep =>
  megabyteStep({ id: 'toolu_3', name: 'ask', input: { q: 'may I?' }, kind: 'server', approval: 'required' });

describe("a list reads a session's step outside Lua", { timeout: 60_000 }, () => {
  const suite = storeRedisForSuite();
  const decode = (h: Record<string, string>) => (h['id'] ? decodeFields(h) : null);
  let redis: RedisClient;
  let index: SessionIndex;
  before(() => {
    redis = suite.redis;
    index = new SessionIndex(redis, decode, () => Date.now());
  });
  const meta = sessionKeys(ID).meta;
  /** Bytes Redis has sent its clients (INFO's own answer included, a few kB). */
  const sent = async () => Number(/total_net_output_bytes:(\d+)/.exec(await redis.info('stats'))?.[1] ?? 0);
  /** The session's view as a GET reads it (the whole hash). */
  const whole = async () => sessionView(decode(await redis.hgetall(meta))!);

  it('a session waiting for a decision: the script reads none of its step, the view is its GET', async () => {
    await redis.hset(meta, { ...fields, ...pendingFields(bigStep()) });
    assert.ok(redis instanceof Redis);
    const monitor = await monitorRedis(Number(redis.options.port));
    const start = await sent();
    let state;
    try {
      state = await index.loadForPage(ID, TENANT);
      await monitor.settle();
    } finally {
      monitor.stop();
    }
    const bytes = (await sent()) - start;
    assert.ok(state, 'the session is read');
    const view = sessionView(state);
    assert.deepEqual(view, await whole());
    assert.equal(view.required_action?.type, 'approve_tool_calls');
    assert.equal(view.required_action.tool_results[0]?.content, 'r'.repeat(MB));
    assert.deepEqual(view.usage.server_tool_use, { web_search: 2 });
    // The script's reads (MONITOR's `lua` lines): field names, and no value of the step's fields. list-view-1.lua
    // read `pending` and `result:toolu_1` (3 MB) with an HMGET of its own.
    const reads = monitor.scripted.filter((c) => /^(hget|hmget|hgetall|hvals)$/i.test(c[0]!));
    assert.ok(reads.length > 0, 'MONITOR showed the script');
    for (const c of reads) {
      assert.ok(!/^(hgetall|hvals)$/i.test(c[0]!), `the script read the whole hash: ${c[0]}`);
      const named = c.slice(2).filter((f) => f === 'pending' || f.startsWith('result:'));
      assert.deepEqual(named, [], `the script read ${c[0]} ${named.join(' ')}`);
    }
    // The step's values were sent once (the list's own HMGET): 3 MB, and a few kB besides.
    const step = (await redis.hstrlen(meta, 'pending')) + (await redis.hstrlen(meta, 'result:toolu_1'));
    assert.ok(step > 3 * MB);
    assert.ok(bytes < step + 32_000, `Redis sent ${bytes} bytes for a step of ${step}`);
  });

  it('a session that moves between the two reads is read whole: its view is of one moment', async () => {
    await redis.hset(meta, { ...fields, ...pendingFields(bigStep()) });
    // The decision lands (and its run starts) between the script's read and the read of the step's values.
    let moved = false;
    const racing = new Proxy(redis, {
      get(target, key, receiver) {
        const value: unknown = Reflect.get(target, key, receiver);
        if (key !== 'hmgetBuffer' || typeof value !== 'function') return value;
        return async (...args: unknown[]) => {
          if (!moved) {
            moved = true;
            await target.hset(meta, { status: 'running', revision: '13', pending: '' });
          }
          return Reflect.apply(value, target, args) as unknown;
        };
      },
    });
    const state = await new SessionIndex(racing, decode, () => Date.now()).loadForPage(ID, TENANT);
    assert.equal(moved, true, 'the step was read after the script');
    assert.ok(state);
    assert.equal(state.status, 'running');
    assert.equal(state.revision, 13);
    assert.equal(sessionView(state).required_action, null);
    assert.deepEqual(sessionView(state), await whole());
  });

  it('a session without a step, or not waiting for its client, has none read', async () => {
    for (const [status, step] of [
      ['requires_action', null],
      ['running', bigStep()],
    ] as const) {
      await redis.hset(meta, { ...fields, status, ...pendingFields(step) });
      const start = await sent();
      const state = await index.loadForPage(ID, TENANT);
      assert.ok((await sent()) - start < 32_000, status);
      assert.ok(state);
      assert.equal(state.pending, null);
      assert.equal(sessionView(state).required_action, null);
      // The view is the GET's: a running session's view does not show its step.
      assert.deepEqual(sessionView(state), await whole());
    }
  });
});
