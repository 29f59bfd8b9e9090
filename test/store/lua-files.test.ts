import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import path from 'node:path';
import { Redis } from 'ioredis';
import { defineLuaCommands } from '../../src/store/lua-commands.js';
import { startTestRedis } from '../helpers/redis.js';
import { DueSet } from '../../src/store/due.js';

const SRC = path.join(import.meta.dirname, '../..', 'src');
const files = (readdirSync(SRC, { recursive: true, encoding: 'utf8' }) as string[]).filter((f) =>
  f.endsWith('.lua'),
);

describe('Lua lives in .lua files', () => {
  it('no TypeScript module holds a script', () => {
    for (const f of readdirSync(SRC, { recursive: true, encoding: 'utf8' }) as string[]) {
      if (!f.endsWith('.ts')) continue;
      const text = readFileSync(path.join(SRC, f), 'utf8');
      assert.doesNotMatch(text, /redis\.call\(/, `${f} holds Lua`);
    }
  });

  it('every script has a KEYS/ARGV/returns header and uses no key beyond its <name>-<numkeys>', () => {
    const scripts = files.filter((f) => !f.includes(`includes${path.sep}`));
    assert.ok(scripts.length >= 10);
    for (const f of scripts) {
      const text = readFileSync(path.join(SRC, f), 'utf8');
      const header = text
        .split('\n')
        .filter((l) => l.startsWith('--'))
        .join('\n');
      assert.match(header, /KEYS\[1\]/, `${f}: KEYS in the header`);
      assert.match(header, /ARGV\[1\]/, `${f}: ARGV in the header`);
      assert.match(header, /Returns/, `${f}: what it returns in the header`);
      const numkeys = /-(\d+)\.lua$/.exec(f)?.[1];
      if (numkeys === undefined) continue; // a variadic key list
      const used = [...text.matchAll(/KEYS\[(\d+)\]/g)].map((m) => Number(m[1]));
      assert.ok(Math.max(...used) <= Number(numkeys), `${f} uses KEYS[${Math.max(...used)}]`);
    }
  });

  it('two versions of one script in a folder (a stale build) are refused, not one taken by chance', (t) => {
    const dir = mkdtempSync(path.join(tmpdir(), 'lua-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const lua = readFileSync(path.join(SRC, 'store/lua/tree-due-3.lua'), 'utf8');
    writeFileSync(path.join(dir, 'tree-due-2.lua'), lua);
    writeFileSync(path.join(dir, 'tree-due-3.lua'), lua);
    const client = new Redis({ lazyConnect: true });
    t.after(() => client.disconnect());
    assert.throws(() => defineLuaCommands(client, pathToFileURL(`${dir}/`), 'sess'), /define sessTreeDue/);
  });

  it('includes are expanded once and the commands run on a real Redis', async (t) => {
    const redis = await startTestRedis();
    t.after(() => redis.stop());
    const client = new Redis(redis.url);
    t.after(() => client.quit());
    const names = defineLuaCommands(client, new URL('../../src/store/lua/', import.meta.url), 'sess');
    assert.deepEqual(names.sort(), [
      'sessAcquireRun',
      'sessAppendEvents',
      'sessAppendEventsMany',
      'sessApply',
      'sessChildUsage',
      'sessClientTokenMint',
      'sessClientTokenRevoke',
      'sessDestroy',
      'sessDueAdd',
      'sessDueRead',
      'sessDueSettle',
      'sessIdemKeep',
      'sessIdemRelease',
      'sessListViewFields',
      'sessMemoryList',
      'sessMemoryRemove',
      'sessMemoryRename',
      'sessMemoryWrite',
      'sessNewestId',
      'sessReadEvents',
      'sessRelease',
      'sessRenew',
      'sessRunDueDrop',
      'sessRunDueRead',
      'sessRunDueSet',
      'sessRunSlotHold',
      'sessRunSlotPrune',
      'sessRunSlotTake',
      'sessSegmentIfFits',
      'sessSegmentPart',
      'sessSegmentsPage',
      'sessStorageGiveBack',
      'sessToolRetried',
      'sessTreeDue',
      'sessTreeDueRead',
      'sessTreeDueSettle',
    ]);
    // The quotas' scripts include the store's now.lua from their own folder.
    const quotas = defineLuaCommands(client, new URL('../../src/quotas/lua/', import.meta.url), 'quota');
    assert.deepEqual(quotas.sort(), [
      'quotaAcquireSlot',
      'quotaIngestHit',
      'quotaLapsedReplicas',
      'quotaRateHit',
      'quotaRenewSlots',
      'quotaReplicaAlive',
    ]);
    assert.equal(await client.quotaAcquireSlot('q:{x}:ws', 60_000, 1, 'r:1'), 1);
    assert.equal(await client.quotaRenewSlots('q:{x}:ws', 60_000, 'r:1', 'r:2'), 1);
    // append-events includes the notice: it publishes the events it wrote.
    const sub = new Redis(redis.url);
    t.after(() => sub.quit());
    await sub.subscribe('ev:{x}');
    const got = new Promise<string>((resolve) => sub.once('message', (_c: string, m: string) => resolve(m)));
    const scripted = client as unknown as {
      sessAppendEvents(...a: Array<string | number>): Promise<string>;
    };
    const id = await scripted.sessAppendEvents(
      's:{x}',
      's:{x}:e',
      'ev:{x}',
      100,
      5,
      16384,
      1_000_000,
      '',
      0,
      'turn.started',
      '{"iteration":1}',
    );
    const notice = (await got).split('\n');
    assert.deepEqual(notice, ['E', '0-0', id, id, 'turn.started', '5', '0', '{"iteration":1}']);
  });

  it('append-events-many writes each session as append-events does: its log, its trim, its notice', async (t) => {
    const redis = await startTestRedis();
    t.after(() => redis.stop());
    const client = new Redis(redis.url);
    t.after(() => client.quit());
    defineLuaCommands(client, new URL('../../src/store/lua/', import.meta.url), 'sess');
    const scripted = client as unknown as {
      sessAppendEventsMany(...a: Array<string | number>): Promise<number>;
    };
    // Session a has a meta hash (its log is counted and trimmed to 2 entries); b has none (written, not counted).
    await client.hset('s:{a}', 'status', 'running');
    await client.xadd('s:{a}:e', '*', 't', 'old', 'd', '{}', 'at', '1');
    const sub = new Redis(redis.url);
    t.after(() => sub.quit());
    await sub.subscribe('ev:{a}', 'ev:{b}');
    const notices = new Map<string, string[]>();
    const got = new Promise<void>((resolve) =>
      sub.on('message', (channel: string, m: string) => {
        notices.set(channel, m.split('\n'));
        if (notices.size === 2) resolve();
      }),
    );
    const n = await scripted.sessAppendEventsMany(
      4,
      's:{a}',
      's:{a}:e',
      's:{b}',
      's:{b}:e',
      2,
      7,
      16384,
      1_000_000,
      'ev:{a}',
      2,
      '',
      0,
      'stream.event',
      '{"n":1}',
      'stream.event',
      '{"n":2}',
      'ev:{b}',
      1,
      '',
      0,
      'turn.started',
      '{"iteration":1}',
    );
    assert.equal(n, 2);
    await got;
    const a = await client.xrange('s:{a}:e', '-', '+');
    assert.deepEqual(
      a.map(([, f]) => f[3]),
      ['{"n":1}', '{"n":2}'],
      "a's oldest entry trimmed: 2 kept",
    );
    const b = await client.xrange('s:{b}:e', '-', '+');
    assert.equal(b.length, 1);
    assert.equal(await client.exists('s:{b}'), 0, 'no meta made for b');
    assert.equal(Number(await client.hget('s:{a}', 'ev_bytes')) > 0, true, "a's log bytes counted");
    const na = notices.get('ev:{a}')!;
    assert.equal(na[0], 'E');
    assert.equal(na[2], a[1]![0], "a's notice ends at its newest event");
    assert.deepEqual(na.slice(3), [
      a[0]![0],
      'stream.event',
      '7',
      '0',
      '{"n":1}',
      a[1]![0],
      'stream.event',
      '7',
      '0',
      '{"n":2}',
    ]);
    assert.deepEqual(notices.get('ev:{b}'), [
      'E',
      '0-0',
      b[0]![0],
      b[0]![0],
      'turn.started',
      '7',
      '0',
      '{"iteration":1}',
    ]);
  });

  it('a batch sent again under its mark writes only what had not landed (event-mark.lua)', async (t) => {
    const redis = await startTestRedis();
    t.after(() => redis.stop());
    const client = new Redis(redis.url);
    t.after(() => client.quit());
    defineLuaCommands(client, new URL('../../src/store/lua/', import.meta.url), 'sess');
    const scripted = client as unknown as {
      sessAppendEvents(...a: Array<string | number>): Promise<string | null>;
      sessAppendEventsMany(...a: Array<string | number>): Promise<number>;
    };
    await client.hset('s:{m}', 'status', 'running', 'fence', '3');
    const events = (...ns: number[]) => ns.flatMap((n) => ['stream.event', `{"n":${n}}`]);
    const one = (token: string, first: number, ...ns: number[]) =>
      scripted.sessAppendEvents(
        's:{m}',
        's:{m}:e',
        'ev:{m}',
        100,
        5,
        16384,
        1_000_000,
        token,
        first,
        ...events(...ns),
      );
    const many = (token: string, first: number, ...ns: number[]) =>
      scripted.sessAppendEventsMany(
        2,
        's:{m}',
        's:{m}:e',
        100,
        5,
        16384,
        1_000_000,
        'ev:{m}',
        ns.length,
        token,
        first,
        ...events(...ns),
      );
    const logged = async () => (await client.xrange('s:{m}:e', '-', '+')).map(([, f]) => JSON.parse(f[3]!).n);

    // Tokens are `<fence>:<random>`: the session's fence is 3.
    await one('3:a', 1, 1, 2);
    assert.equal(await one('3:a', 1, 1, 2), null, 'sent again whole: nothing written');
    await many('3:a', 1, 1, 2, 3, 4);
    assert.deepEqual(await logged(), [1, 2, 3, 4], 'the landed part skipped, the rest written');
    assert.equal(await client.hget('s:{m}', 'ev_mark'), '3:a 4');
    await one('3:a', 3, 3, 4);
    assert.equal(
      await client.hget('s:{m}', 'ev_mark'),
      '3:a 4',
      'an older batch leaves the mark where it is',
    );
    await one('3:a', 4, 4, 5);
    assert.deepEqual(await logged(), [1, 2, 3, 4, 5], 'one statement: the landed part skipped');
    await one('', 0, 6);
    assert.equal(await client.hget('s:{m}', 'ev_mark'), '3:a 5', 'an unmarked write leaves it too');
    // A takeover: the new owner's fence is 4, its token another; the old owner's late retry writes nothing.
    await client.hset('s:{m}', 'fence', '4');
    await many('4:b', 1, 7);
    assert.deepEqual(await logged(), [1, 2, 3, 4, 5, 6, 7], "another writer's numbers start afresh");
    assert.equal(await client.hget('s:{m}', 'ev_mark'), '4:b 1');
    assert.equal(await one('3:a', 6, 66), null, 'an older fence: nothing written');
    assert.equal(await many('3:a', 6, 66, 67), 1);
    assert.deepEqual(await logged(), [1, 2, 3, 4, 5, 6, 7]);
    assert.equal(
      await client.hget('s:{m}', 'ev_mark'),
      '4:b 1',
      "the old owner's write leaves the mark alone",
    );
    await one('4:b', 1, 7, 8);
    assert.deepEqual(await logged(), [1, 2, 3, 4, 5, 6, 7, 8], "the new owner's retry skips what landed");
    // A deleted session (no meta): a marked write writes nothing; an unmarked one is written, never marked, no
    // meta made.
    await client.del('s:{m}');
    assert.equal(await one('4:b', 3, 9), null);
    await one('', 0, 10);
    assert.equal(await client.exists('s:{m}'), 0);
    assert.deepEqual((await logged()).slice(-2), [8, 10]);
  });

  it('a deadline registered while a sweep settles the old one is kept (due-add-1.lua, due-settle-1.lua)', async (t) => {
    const redis = await startTestRedis();
    t.after(() => redis.stop());
    const client = new Redis(redis.url);
    t.after(() => client.quit());
    defineLuaCommands(client, new URL('../../src/store/lua/', import.meta.url), 'sess');
    const due = new DueSet(client, 'actions:due');
    await due.add('s1', 1000);
    // A sweeper reads the entry (the session no longer waits, as it reads it), ...
    const [read] = (await due.dueNow(10)).entries;
    assert.equal(read!.at, 1000);
    // ... a write registers a new, later deadline meanwhile (ZADD LT would leave the score as it was), ...
    await due.add('s1', 4000);
    // ... and the sweeper's drop finds the score moved: the entry stays, due at once, to be read again.
    assert.equal(await due.settle(read!, null), false);
    assert.equal(Number(await client.zscore('actions:due', 's1')), 999);
    // A sooner deadline takes its own time; a settle with the score read now goes through.
    await due.add('s1', 500);
    const [again] = (await due.dueNow(10)).entries;
    assert.equal(again!.at, 500);
    assert.equal(await due.settle(again!, 4000), true);
    assert.equal(Number(await client.zscore('actions:due', 's1')), 4000);
  });
});
