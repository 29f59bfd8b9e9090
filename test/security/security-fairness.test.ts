/**
 * Issue 22's noisy neighbour, the fairness part: one tenant's expensive reads (list pages, whole histories,
 * iteration records: up to a MiB or more of its own data decoded and encoded each) are made one after another, in
 * its own line, so another tenant's request waits for at most one of them. Before, a tenant's 20 reads of a 2 MB
 * history whose Redis replies arrived together were made in one turn of the event loop (a 43 ms block, measured by
 * test/security/security-noisy-neighbour.test.ts). Observed here in the order Redis runs the commands (MONITOR):
 * each read's first command is sent once the read before it has its answer made.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { monitorRedis } from '../helpers/redis-monitor.js';
import { connectSse } from '../fixtures/event-clients.js';

describe("a tenant's expensive reads", () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-acme,globex:key-globex' } });
  });
  after(async () => h?.close());

  it('are made one at a time per tenant, in arrival order; another tenant has its own line', async () => {
    const acme = h.api.as('key-acme');
    const globex = h.api.as('key-globex');
    const text = 'w'.repeat(100_000);
    const messages = Array.from({ length: 3 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: [{ type: 'text', text }],
    }));
    const id = (await acme.post('/v1/sessions', { start: false, messages })).body.id as string;
    const other = (await globex.post('/v1/sessions', { start: false, messages })).body.id as string;
    const monitor = await monitorRedis(h.redis.port);
    try {
      const reads = await Promise.all([
        ...Array.from({ length: 4 }, () => acme.get(`/v1/sessions/${id}/messages`)),
        globex.get(`/v1/sessions/${other}/messages`),
      ]);
      for (const r of reads) assert.equal(r.status, 200);
      assert.equal(reads[0]!.body.data.length, 3);
      // acme's reads: its session's hash read (the tenant check), then its history: never two hashes in a row.
      await monitor.settle();
      const mine = monitor.commands
        .filter((c) => c.some((a) => a.includes(id)))
        .map((c) => c[0]!.toLowerCase())
        .filter((c) => c === 'hgetall' || c === 'lrange');
      assert.deepEqual(mine, [
        'hgetall',
        'lrange',
        'hgetall',
        'lrange',
        'hgetall',
        'lrange',
        'hgetall',
        'lrange',
      ]);
      // globex's read did not wait for acme's line: its history was read before acme's last one.
      const order = monitor.commands.map((c) => `${c[0]!.toLowerCase()} ${c[1] ?? ''}`);
      const globexRead = order.findIndex((c) => c.startsWith('lrange') && c.includes(other));
      const acmeLast = order.findLastIndex((c) => c.startsWith('lrange') && c.includes(id));
      assert.ok(globexRead >= 0 && globexRead < acmeLast, order.join('\n'));
    } finally {
      monitor.stop();
    }
  });

  it("JSON pages of the event log are in the tenant's line too; its SSE streams on that route are not", async () => {
    const acme = h.api.as('key-acme');
    const globex = h.api.as('key-globex');
    const messages = Array.from({ length: 3 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: [{ type: 'text', text: 'e'.repeat(100_000) }],
    }));
    const id = (await acme.post('/v1/sessions', { start: false, messages })).body.id as string;
    const other = (await globex.post('/v1/sessions', { start: false, messages })).body.id as string;
    // An open SSE stream of acme's (same route): it holds no place in the line, or the pages below would wait on it.
    const sse = await connectSse(h.service.url, id, { token: 'key-acme' });
    const monitor = await monitorRedis(h.redis.port);
    try {
      const reads = await Promise.all([
        ...Array.from({ length: 4 }, () => acme.get(`/v1/sessions/${id}/events?limit=1000`)),
        globex.get(`/v1/sessions/${other}/events?limit=1000`),
      ]);
      for (const r of reads) assert.equal(r.status, 200);
      assert.ok(reads[0]!.body.data.length >= 2);
      // acme's reads: its session's hash read (the tenant check), then its page (the script): never two in a row.
      await monitor.settle();
      const mine = monitor.commands
        .filter((c) => c.some((a) => a.includes(id)))
        .map((c) => c[0]!.toLowerCase())
        .filter((c) => c === 'hgetall' || c === 'evalsha');
      assert.deepEqual(mine, [
        'hgetall',
        'evalsha',
        'hgetall',
        'evalsha',
        'hgetall',
        'evalsha',
        'hgetall',
        'evalsha',
      ]);
      const order = monitor.commands.map((c) => `${c[0]!.toLowerCase()} ${c.join(' ')}`);
      const globexRead = order.findIndex((c) => c.startsWith('evalsha') && c.includes(other));
      const acmeLast = order.findLastIndex((c) => c.startsWith('evalsha') && c.includes(id));
      assert.ok(globexRead >= 0 && globexRead < acmeLast, order.join('\n'));
    } finally {
      monitor.stop();
      sse.close();
    }
  });
});
