/**
 * The event log's scripts read bounded bytes of a log of large events. A script copies every stream entry it reads
 * whole into Redis's Lua, and Redis serves no other tenant meanwhile: a page of a 16 MB log of 900 KB events copied
 * the whole log to return one event, long enough for the health probe to mark Redis down for every tenant. The
 * entries each script read are the XRANGE/XREVRANGE calls MONITOR shows it making (`lua`), replayed on the same log
 * (or counted by their COUNT where the script changed the log).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { START } from '../../src/events/cursor.js';
import { defineChatCommands, runStartCursor } from '../../src/chat/run-start.js';
import { EventLog, nextId } from '../../src/store/events.js';
import { eventLogKeys, sessionKeys } from '../../src/store/keys.js';
import { parseNotice, type Notice } from '../../src/events/notice.js';
import { scheduleKeys } from '../../src/schedules/keys.js';
import '../../src/schedules/lua/commands.js';
import { defineLuaCommands } from '../../src/store/lua-commands.js';
import { storeRedisForSuite } from '../helpers/redis.js';
import { monitorRedis } from '../helpers/redis-monitor.js';

const LARGE = 500_000;

describe('event log scripts read bounded bytes', () => {
  const suite = storeRedisForSuite();
  /** The suite's client (a single node: MONITOR and `duplicate`). */
  const client = (): Redis => {
    assert.ok(suite.redis instanceof Redis);
    return suite.redis;
  };

  /**
   * The stream reads (command and arguments) the scripts `run` makes issue, in order (`anySource`: the client's own
   * reads too).
   */
  async function scriptReads(
    r: Redis,
    run: () => Promise<unknown>,
    { anySource = false } = {},
  ): Promise<string[][]> {
    // A plain socket (test/helpers/redis-monitor.ts): ioredis's own monitor mode races its command queue (a line of
    // another connection's ready check, arriving in the chunk after MONITOR's OK, failed this suite once in CI).
    const monitor = await monitorRedis(r.options.port!);
    try {
      await run();
      // MONITOR shows commands in the order Redis ran them: once it shows the marker, it has shown the scripts'.
      await monitor.settle();
    } finally {
      monitor.stop();
    }
    const stream = (args: string[]) => ['XRANGE', 'XREVRANGE'].includes((args[0] ?? '').toUpperCase());
    const reads = [...monitor.scripted.filter(stream), ...(anySource ? monitor.commands.filter(stream) : [])];
    assert.ok(reads.length > 0, 'MONITOR showed the scripts reading');
    return reads;
  }

  /** The bytes of the field values of the entries `reads` return on the log as it is now. */
  async function bytesOf(r: Redis, reads: string[][]): Promise<number> {
    let total = 0;
    for (const [cmd, ...args] of reads) {
      const rows = (await r.call(cmd!, ...args)) as Array<[string, string[]]>;
      for (const [, fields] of rows) for (let i = 1; i < fields.length; i += 2) total += fields[i]!.length;
    }
    return total;
  }

  async function writeLog(r: Redis, id: string, sizes: number[]): Promise<string[]> {
    const events = sessionKeys(id).events;
    const ids: string[] = [];
    for (const [i, size] of sizes.entries())
      ids.push(
        (await r.xadd(events, '*', 't', 'turn.completed', 'd', String(i % 10).repeat(size), 'at', '1'))!,
      );
    return ids;
  }

  /**
   * The ids of the entries `reads` return on the logs as they are now; `moved`: [key, copy], the reads of `key` made
   * on `copy` instead (the log as it was before the script wrote to it).
   */
  async function entriesRead(r: Redis, reads: string[][], moved?: [string, string]): Promise<string[]> {
    const out: string[] = [];
    for (const [cmd, ...args] of reads) {
      const on = args.map((a) => (moved && a === moved[0] ? moved[1] : a));
      for (const [entry] of (await r.call(cmd!, ...on)) as Array<[string, string[]]>) out.push(entry);
    }
    return out.sort();
  }

  /** The notice `write` makes its script publish on `channel`, as the relays parse it. */
  async function noticeOf(r: Redis, channel: string, write: () => Promise<unknown>): Promise<Notice> {
    const sub = r.duplicate();
    try {
      await sub.subscribe(channel);
      const message = new Promise<string>((resolve) =>
        sub.once('message', (_c: string, m: string) => resolve(m)),
      );
      await write();
      return parseNotice(await message);
    } finally {
      sub.disconnect();
    }
  }

  /**
   * Appends one event as the stream relays do (includes/event-log.lua records the newest id, `ev_last`), to a log
   * trimmed past `maxBytes`; returns its id.
   */
  const appendOne = async (r: Redis, id: string, data: string, maxBytes = 64 * LARGE): Promise<string> => {
    const [meta, events] = eventLogKeys(id);
    const written = await r.sessAppendEvents(
      meta,
      events,
      'chan',
      10_000,
      1,
      1_000,
      maxBytes,
      '',
      0,
      'turn.completed',
      data,
    );
    assert.ok(written);
    return written;
  };

  /** The suite's client and the keys of session `id`'s log, its meta hash written as an idle session's. */
  async function idleLog(id: string): Promise<{ r: Redis; meta: string; events: string }> {
    const r = client();
    const [meta, events] = eventLogKeys(id);
    await r.hset(meta, 'status', 'idle');
    return { r, meta, events };
  }

  type Page = Awaited<ReturnType<EventLog['page']>>;
  /** The page of `id`'s log after `after`, and the stream reads its script made. */
  async function pageReads(
    r: Redis,
    log: EventLog,
    id: string,
    after: string,
    limits: { count: number; maxBytes: number },
  ): Promise<{ page: Page; reads: string[][] }> {
    let page: Page | undefined;
    const reads = await scriptReads(r, async () => (page = await log.page(id, after, limits)));
    assert.ok(page);
    return { page, reads };
  }
  const idsOf = (page: Page) => page.events.map((e) => e.id);

  it('a page of large events reads the page, one event past it and the newest, not the log', async () => {
    const r = client();
    const id = 'ses_largeeventspage';
    const ids = await writeLog(
      r,
      id,
      Array.from({ length: 12 }, () => LARGE),
    );
    const log = new EventLog(r);
    const limits = { count: 500, maxBytes: 1_048_576 };

    // From the start: two events fit the budget.
    let { page, reads } = await pageReads(r, log, id, START, limits);
    assert.deepEqual(idsOf(page), ids.slice(0, 2));
    assert.equal(page.firstId, ids[0]);
    assert.equal(page.lastId, ids.at(-1));
    assert.equal(page.more, true);
    // The page (2), the one that did not fit, the newest (its id): 4 events, where 6 + the rest of the log were.
    assert.ok((await bytesOf(r, reads)) <= 4 * (LARGE + 20), `read ${await bytesOf(r, reads)}`);

    // From the middle, with a budget below one event: the event after the cursor alone.
    ({ page, reads } = await pageReads(r, log, id, ids[4]!, { count: 500, maxBytes: 1000 }));
    assert.deepEqual(idsOf(page), [ids[5]]);
    assert.equal(page.firstId, ids[0]);
    assert.equal(page.lastId, ids.at(-1));
    // The page, the oldest and the newest (their ids): 3 events.
    assert.ok((await bytesOf(r, reads)) <= 3 * (LARGE + 20), `read ${await bytesOf(r, reads)}`);

    // The last page reads no more than itself and the oldest.
    ({ page, reads } = await pageReads(r, log, id, ids[9]!, limits));
    assert.deepEqual(idsOf(page), ids.slice(10));
    assert.equal(page.more, false);
    assert.ok((await bytesOf(r, reads)) <= 3 * (LARGE + 20), `read ${await bytesOf(r, reads)}`);
  });

  it("a page's newest id is the log's record of it: no page reads the newest entry for its id", async () => {
    const id = 'ses_newestrecorded';
    const { r, meta } = await idleLog(id);
    // Written as the service writes its logs (includes/event-log.lua records the newest id, `ev_last`).
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push(await appendOne(r, id, String(i).repeat(LARGE)));
    assert.equal(await r.hget(meta, 'ev_last'), ids.at(-1));
    const log = new EventLog(r);

    // From the start, stopped by the budget: the page (2) and the one that did not fit; the newest was read too.
    let { page, reads } = await pageReads(r, log, id, START, { count: 500, maxBytes: 1_048_576 });
    assert.deepEqual(idsOf(page), ids.slice(0, 2));
    assert.deepEqual([page.firstId, page.lastId, page.more], [ids[0], ids.at(-1), true]);
    assert.deepEqual(await entriesRead(r, reads), ids.slice(0, 3));

    // From the middle, one event: it and the oldest.
    ({ page, reads } = await pageReads(r, log, id, ids[3]!, { count: 500, maxBytes: 1000 }));
    assert.deepEqual(idsOf(page), [ids[4]]);
    assert.deepEqual([page.firstId, page.lastId, page.more], [ids[0], ids.at(-1), true]);
    assert.deepEqual(await entriesRead(r, reads), [ids[0], ids[4]]);

    // A page that ends at the newest event, full by its count: nothing follows it, nothing more is read.
    ({ page, reads } = await pageReads(r, log, id, ids[5]!, { count: 2, maxBytes: 4 * LARGE }));
    assert.deepEqual(idsOf(page), ids.slice(6));
    assert.deepEqual([page.lastId, page.more], [ids.at(-1), false]);
    assert.deepEqual(await entriesRead(r, reads), [ids[0], ...ids.slice(6)]);

    // Past the newest (the bounds alone): the oldest is read, not the newest.
    ({ page, reads } = await pageReads(r, log, id, ids.at(-1)!, { count: 10, maxBytes: 100 }));
    assert.deepEqual([page.events, page.firstId, page.lastId], [[], ids[0], ids.at(-1)]);
    assert.deepEqual(await entriesRead(r, reads), [ids[0]]);
  });

  it('a newest id not recorded (a writer of an older release) is read from the log, and an empty log has none', async () => {
    const id = 'ses_newestunrecorded';
    const { r, meta, events } = await idleLog(id);
    await appendOne(r, id, 'a');
    const recorded = await r.hget(meta, 'ev_last');
    // XADDs that leave `ev_last` behind.
    const ids = await writeLog(r, id, [LARGE, LARGE, 10]);
    const log = new EventLog(r);
    for (const [after, limits] of [
      [START, { count: 1, maxBytes: 1_048_576 }],
      [recorded!, { count: 500, maxBytes: 1000 }],
      [ids[1]!, { count: 500, maxBytes: 1000 }],
      [ids[2]!, { count: 500, maxBytes: 1000 }],
    ] as const) {
      const page = await log.page(id, after, limits);
      assert.equal(page.firstId, recorded);
      assert.equal(page.lastId, ids.at(-1), after);
      assert.equal(page.more, page.events.at(-1) !== undefined && page.events.at(-1)!.id !== ids.at(-1));
    }
    // A log gone while its meta hash still names a newest id: no bounds.
    await r.del(events);
    const gone = await log.page(id, START, { count: 10, maxBytes: 100 });
    assert.deepEqual([gone.events, gone.firstId, gone.lastId], [[], null, null]);
    const past = await log.page(id, ids[0]!, { count: 10, maxBytes: 100 });
    assert.deepEqual([past.events, past.firstId, past.lastId], [[], null, null]);
  });

  it("an append's notice names the log's newest id from its record: the newest entry is not read", async () => {
    const id = 'ses_noticeprevrecorded';
    const { r, meta, events } = await idleLog(id);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await appendOne(r, id, String(i).repeat(LARGE)));
    assert.equal(await r.hget(meta, 'ev_last'), ids.at(-1));
    // The log as the next append finds it, where the append's reads are replayed.
    const before = `${events}:before`;
    await r.copy(events, before);
    let added = '';
    let reads: string[][] = [];
    const notice = await noticeOf(r, 'chan', async () => {
      reads = await scriptReads(r, async () => (added = await appendOne(r, id, '{"delta":"x"}')));
    });
    assert.ok(notice.kind === 'events');
    assert.deepEqual([notice.prev, notice.newest], [ids.at(-1), added]);
    // One read, of what follows the record: nothing (an XREVRANGE of one entry copied the newest 500 kB).
    assert.deepEqual(
      reads.map(([cmd]) => cmd!.toUpperCase()),
      ['XRANGE'],
    );
    assert.deepEqual(await entriesRead(r, reads, [events, before]), []);
  });

  it("a notice whose log is ahead of its record, gone, or without a meta hash names the log's newest as it is", async () => {
    const id = 'ses_noticeprevfallback';
    const { r, meta, events } = await idleLog(id);
    /** `prev` of the notice of an append of `data`, and the append's id. */
    const prevOf = async (data: string): Promise<[prev: string, added: string]> => {
      let added = '';
      const notice = await noticeOf(r, 'chan', async () => (added = await appendOne(r, id, data)));
      assert.ok(notice.kind === 'events');
      return [notice.prev, added];
    };
    const [, first] = await prevOf('"a"');
    assert.equal(await r.hget(meta, 'ev_last'), first);
    // XADDs that leave the record behind (a replica of an older release).
    const ahead = await writeLog(r, id, [LARGE, 10]);
    const [prev, second] = await prevOf('"b"');
    assert.equal(prev, ahead.at(-1));
    assert.equal(await r.hget(meta, 'ev_last'), second);
    // The log gone while the hash names a newest: nothing before the append.
    await r.del(events);
    const [none, third] = await prevOf('"c"');
    assert.equal(none, '0-0');
    // A deleted session's log (its meta hash gone, written all the same): its newest, read from the log.
    await r.del(meta);
    assert.equal((await prevOf('"d"'))[0], third);
  });

  it("the log's newest id (a stream opened with a cursor, a channel's start) is its record: the newest entry is not read", async () => {
    const id = 'ses_lastidrecorded';
    const { r, meta, events } = await idleLog(id);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await appendOne(r, id, String(i).repeat(LARGE)));
    const log = new EventLog(r);
    let last: string | null = null;
    const reads = await scriptReads(r, async () => (last = await log.lastId(id)), { anySource: true });
    assert.equal(last, ids.at(-1));
    // What follows the record: nothing (an XREVRANGE of one entry sent the newest 500 kB to the caller).
    assert.deepEqual(await entriesRead(r, reads), []);
    // XADDs that leave the record behind (a replica of an older release): the newest as the log has it.
    const ahead = await writeLog(r, id, [LARGE, 10]);
    assert.equal(await log.lastId(id), ahead.at(-1));
    // No record (the meta hash gone: a deleted session's log): read from the log; no log: none, record or not.
    await r.del(meta);
    assert.equal(await log.lastId(id), ahead.at(-1));
    await r.hset(meta, 'ev_last', ahead.at(-1)!);
    await r.del(events);
    assert.equal(await log.lastId(id), null);
    assert.equal(await log.lastId('ses_nolog'), null);
  });

  it("a schedule's writes name its log's newest id from the schedule's record, its delete before the record goes", async () => {
    const r = client();
    defineLuaCommands(r, new URL('../../src/schedules/lua/', import.meta.url), 'sched');
    const id = 'sch_noticeprev';
    const k = scheduleKeys(id);
    await r.hset(k.meta, 'tenant', 'acme', 'revision', '1');
    const update = async (data: string) => {
      const [code] = await r.schedUpdate(
        k.meta,
        k.events,
        'acme',
        '',
        '{}',
        '[]',
        1,
        data,
        'chan',
        10_000,
        1_000,
        64 * LARGE,
        '-',
      );
      assert.equal(code, 1);
    };
    for (let i = 0; i < 3; i++) await update(JSON.stringify({ note: String(i).repeat(LARGE) }));
    const before = `${k.events}:before`;
    /** The notice of `write` and the entries its reads returned on the log as it was before it. */
    const written = async (write: () => Promise<unknown>): Promise<[Notice, string[]]> => {
      await r.del(before);
      await r.copy(k.events, before);
      let reads: string[][] = [];
      const notice = await noticeOf(r, 'chan', async () => {
        reads = await scriptReads(r, write);
      });
      return [notice, await entriesRead(r, reads, [k.events, before])];
    };
    let newest = (await r.xrevrange(k.events, '+', '-', 'COUNT', 1))[0]![0];
    assert.equal(await r.hget(k.meta, 'ev_last'), newest);
    let [notice, read] = await written(() => update('{"note":"short"}'));
    assert.ok(notice.kind === 'events');
    assert.equal(notice.prev, newest);
    assert.deepEqual(read, []);

    newest = notice.newest;
    [notice, read] = await written(async () => {
      const [code] = await r.schedDelete(
        k.meta,
        k.events,
        k.runs,
        k.fanout,
        'acme',
        '',
        2,
        '{}',
        60_000,
        'chan',
        1_000,
      );
      assert.equal(code, 1);
    });
    assert.ok(notice.kind === 'events');
    assert.equal(notice.prev, newest);
    assert.deepEqual(read, []);
    assert.equal(await r.exists(k.meta), 0);
  });

  it('a page of small events then large ones reads at most twice as many entries as it held so far at once', async () => {
    const r = client();
    const id = 'ses_smallthenlarge';
    // A session's first events are small (its creation, the question, a turn's start), then large tool results.
    const ids = await writeLog(r, id, [100, 100, 100, ...Array.from({ length: 30 }, () => LARGE)]);
    const log = new EventLog(r);
    const { page, reads } = await pageReads(r, log, id, START, { count: 500, maxBytes: 1_048_576 });
    assert.deepEqual(idsOf(page), ids.slice(0, 5));
    assert.equal(page.lastId, ids.at(-1));
    // The small ones one, then two at a time; four next (two large past the page), the newest: 5 large where the
    // reads grown to 64 after the small ones copied the whole log (31).
    const read = await bytesOf(r, reads);
    assert.ok(read <= 5 * (LARGE + 20) + 400, `read ${read}`);
  });

  it('pages of events of mixed sizes are the log, in order, each within its bounds', async () => {
    const r = client();
    const id = 'ses_mixedeventspages';
    // Small events with large ones among them, in runs, as a turn's deltas and its tool results.
    const sizes = Array.from({ length: 300 }, (_, i) => (i % 37 < 3 ? 40_000 + i : 50 + ((i * 7) % 300)));
    const ids = await writeLog(r, id, sizes);
    const log = new EventLog(r);
    for (const limits of [
      { count: 500, maxBytes: 65_536 },
      { count: 7, maxBytes: 1_048_576 },
      { count: 1, maxBytes: 1 },
    ]) {
      const got: string[] = [];
      let after = START;
      for (;;) {
        const page = await log.page(id, after, limits);
        assert.equal(page.firstId, ids[0]);
        assert.equal(page.lastId, ids.at(-1));
        if (page.events.length === 0) break;
        assert.ok(page.events.length <= limits.count);
        // An entry's bytes: its type, data and time.
        const bytes = page.events
          .map((e) => 'turn.completed'.length + sizes[ids.indexOf(e.id)]! + 1)
          .reduce((a, b) => a + b);
        if (page.events.length > 1) assert.ok(bytes <= limits.maxBytes);
        const next = ids.indexOf(page.events.at(-1)!.id) + 1;
        // Full: the next event would not have fitted.
        if (page.more && page.events.length < limits.count)
          assert.ok(bytes + 'turn.completed'.length + sizes[next]! + 1 > limits.maxBytes);
        assert.equal(page.more, next < ids.length);
        got.push(...page.events.map((e) => e.id));
        after = page.events.at(-1)!.id;
      }
      assert.deepEqual(got, ids, JSON.stringify(limits));
    }
    // A cursor past the newest: an empty page, the bounds.
    const past = await log.page(id, nextId(ids.at(-1)!)!, { count: 10, maxBytes: 100 });
    assert.deepEqual(past.events, []);
    assert.equal(past.firstId, ids[0]);
    assert.equal(past.lastId, ids.at(-1));
    const [meta] = eventLogKeys('ses_emptylog');
    await r.hset(meta, 'x', '1');
    const empty = await log.page('ses_emptylog', START, { count: 10, maxBytes: 100 });
    assert.deepEqual([empty.events, empty.firstId, empty.lastId], [[], null, null]);
  });

  it('a write over a full log of large events reads what the trim drops and the entry it keeps, not 32', async () => {
    const id = 'ses_largeeventstrim';
    const { r, meta, events } = await idleLog(id);
    const data = 'x'.repeat(LARGE);
    // A log of five such events at the most.
    const append = () => appendOne(r, id, data, 5 * (LARGE + 50));
    for (let i = 0; i < 8; i++) await append();
    const before = await r.xrange(events, '-', '+');
    assert.equal(before.length, 5);
    const [notice, ...trim] = await scriptReads(r, append);
    // The notice's check of the newest id recorded, on the log before the write: what follows it, nothing.
    assert.deepEqual(notice, ['XRANGE', events, `(${before.at(-1)![0]}`, '+', 'COUNT', '1']);
    const counted = trim.reduce((n, a) => n + (a[0]!.toUpperCase() === 'XRANGE' ? Number(a.at(-1)) : 0), 0);
    assert.ok(counted <= 2, JSON.stringify(trim.map((a) => a.filter((x) => x.length < 100))));
    // Trimmed as before: the oldest went, its id and the oldest kept recorded, the byte count down by it.
    const after = await r.xrange(events, '-', '+');
    assert.deepEqual(
      after.map(([i]) => i),
      [...before.slice(1).map(([i]) => i), after.at(-1)![0]],
    );
    assert.equal(await r.hget(meta, 'ev_cut'), `${before[0]![0]} ${before[1]![0]}`);
    assert.equal(Number(await r.hget(meta, 'ev_bytes')), 5 * (LARGE + 'turn.completed'.length + 32));
  });

  it("a chat stream's run start scans bounded bytes, then starts the replay where it stopped", async () => {
    const r = client();
    defineChatCommands(r);
    const id = 'ses_largeeventsrunstart';
    const events = sessionKeys(id).events;
    const log = (t: string, d: unknown) => r.xadd(events, '*', 't', t, 'd', JSON.stringify(d));
    const question = await log('message.appended', { role: 'user', content: [{ type: 'text', text: 'hi' }] });
    const running = await log('session.status', { status: 'running' });
    for (let i = 0; i < 12; i++)
      await log('message.appended', {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: `t${i}`, content: 'r'.repeat(LARGE) }],
      });
    // Unbounded by bytes: the question is found.
    const whole = await runStartCursor(r, id, 1000, false, Number.MAX_SAFE_INTEGER);
    assert.deepEqual(whole, { cursor: question, run: running, midRun: false, kept: undefined });
    let start: Awaited<ReturnType<typeof runStartCursor>> = null;
    const reads = await scriptReads(
      r,
      async () => (start = await runStartCursor(r, id, 1000, false, 1_048_576)),
    );
    // Past the budget: from where the scan stopped, mid-run.
    assert.equal(start!.midRun, true);
    assert.equal(start!.run, undefined);
    assert.ok(start!.cursor > running!);
    assert.ok((await bytesOf(r, reads)) <= 4 * (LARGE + 100), `read ${await bytesOf(r, reads)}`);
  });
});
