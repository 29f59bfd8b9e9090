import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import pino from 'pino';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { EventHub } from '../../src/events/hub.js';
import type { Sink } from '../../src/events/reader.js';
import type { OutEvent } from '../../src/events/envelope.js';
import { parseNotice } from '../../src/events/notice.js';
import { eventsChannel, sessionKeys } from '../../src/store/keys.js';
import { NOTICE_MAX_BYTES, SessionStore } from '../../src/store/store.js';
import { SessionChannels } from '../../src/store/channels.js';
import { EventLog } from '../../src/store/events.js';

/** A sink that keeps what it is sent. */
function memorySink(): Sink & { got: OutEvent[]; wait(n: number, ms?: number): Promise<void> } {
  const got: OutEvent[] = [];
  const waiters: Array<() => void> = [];
  return {
    got,
    send(ev) {
      got.push(ev);
      for (const w of waiters.splice(0)) w();
      return true;
    },
    ready: () => true,
    expired: () => assert.fail('cursor expired'),
    gone: () => assert.fail('log gone'),
    failed: (err) => assert.fail(String(err)),
    shutdown() {},
    async wait(n, ms = 5000) {
      const until = Date.now() + ms;
      while (got.length < n) {
        if (Date.now() > until) throw new Error(`got ${got.length} of ${n} events`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
      }
    },
  };
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** XRANGE calls Redis has run so far (the hub reads the log with XRANGE; a notice's events need none). */
async function xranges(admin: Redis): Promise<number> {
  const info = await admin.info('commandstats');
  return Number(/cmdstat_xrange:calls=(\d+)/.exec(info)?.[1] ?? 0);
}

describe('event notices (pub/sub carries the events)', () => {
  let redis: TestRedis;
  let cmd: Redis;
  let sub: Redis;
  let admin: Redis;
  let hub: EventHub;
  let channels: SessionChannels;
  let store: SessionStore;

  before(async () => {
    redis = await startTestRedis();
    cmd = new Redis(redis.url);
    sub = new Redis(redis.url);
    admin = new Redis(redis.url);
    channels = new SessionChannels(sub);
    hub = new EventHub({ eventLog: new EventLog(cmd), channels, logger: pino({ level: 'silent' }) });
    store = new SessionStore(cmd, { eventLogMax: 10_000 });
  });
  after(async () => {
    hub.close();
    channels.close();
    for (const c of [cmd, sub, admin]) c.disconnect();
    await redis.stop();
  });

  /** Every notice published on a session's events channel, from now on. */
  async function spyNotices(id: string): Promise<{ seen: string[]; spy: Redis }> {
    const seen: string[] = [];
    const spy = new Redis(redis.url);
    await spy.subscribe(eventsChannel(id));
    spy.on('message', (_c, m) => seen.push(m));
    return { seen, spy };
  }

  /** Subscribes from the start of an empty log and waits until the subscription is live. */
  async function live(id: string) {
    const sink = memorySink();
    const s = hub.subscribe(id, '0-0', sink, 'default');
    const until = Date.now() + 5000;
    while (!s.live) {
      if (Date.now() > until) throw new Error('never went live');
      await new Promise((r) => setTimeout(r, 10));
    }
    return sink;
  }

  it('fans out appended events from the notice alone, with no read of the log', async () => {
    const id = 'ses_notice000001';
    const sink = await live(id);
    const before = await xranges(admin);
    for (let i = 0; i < 20; i++) {
      await store.appendEvents(id, [
        ['stream.event', JSON.stringify({ i, text: 'é "q" \\ end' })],
        ['stream.event', JSON.stringify({ i, second: true })],
      ]);
    }
    await sink.wait(40);
    assert.equal(await xranges(admin), before, 'no XRANGE while the notices carried the events');
    // Exactly the log, in order, with the log's ids.
    const log = await cmd.xrange(sessionKeys(id).events, '-', '+');
    assert.deepEqual(
      sink.got.map((e) => e.id),
      log.map(([eid]) => eid),
    );
    assert.deepEqual(JSON.parse(sink.got[0]!.json).data, { i: 0, text: 'é "q" \\ end' });
    assert.deepEqual(JSON.parse(sink.got[39]!.json).data, { i: 19, second: true });
  });

  it("reads no log on the subscriber connection's first ready, and reads it after a reconnection", async () => {
    // A hub on a connection still connecting: its first `ready` comes after the channel below started.
    const freshSub = new Redis(redis.url, { connectionName: 'notice-fresh-sub' });
    const freshChannels = new SessionChannels(freshSub);
    // Registered after the hub's: ioredis calls a `ready` event's listeners in order, so when this one runs the
    // hub's has decided whether this `ready` is a reconnection (it reads the logs at once when it is).
    const reconnections: number[] = [];
    let readies = 0;
    const freshHub = new EventHub({
      eventLog: new EventLog(cmd),
      channels: freshChannels,
      logger: pino({ level: 'silent' }),
    });
    freshChannels.onReconnect(() => reconnections.push(readies));
    freshSub.on('ready', () => readies++);
    try {
      assert.notEqual(freshSub.status, 'ready');
      const id = 'ses_notice000009';
      const sink = memorySink();
      const s = freshHub.subscribe(id, '0-0', sink, 'default');
      await until(() => s.live);
      await store.appendEvents(id, [['stream.event', '{"n":1}']]);
      await sink.wait(1);
      assert.equal(readies, 1);
      // The hub reads the logs again only from its channels' reconnection listener, which this one follows.
      assert.deepEqual(reconnections, [], 'the first ready is no reconnection');
      const baseline = await xranges(admin);
      assert.equal(sink.got.length, 1);

      // A real reconnection: the server drops the subscriber's connection; ioredis connects again.
      const list = String(await admin.client('LIST'));
      const subId = /id=(\d+) [^\n]*name=notice-fresh-sub/.exec(list)?.[1];
      assert.ok(subId, list);
      await admin.client('KILL', 'ID', subId);
      await until(() => reconnections.length === 1);
      assert.deepEqual(reconnections, [1], 'the second ready is a reconnection');
      await until(() => readies === 2);
      // The hub reads every watched log at once: an XRANGE (waited for: it is sent, not yet run).
      const end = Date.now() + 5000;
      while ((await xranges(admin)) === baseline)
        assert.ok(Date.now() < end, 'no XRANGE after the reconnection');
    } finally {
      freshHub.close();
      freshChannels.close();
      freshSub.disconnect();
    }
  });

  it('reads the log when a notice does not follow its cursor (an event written without one)', async () => {
    const id = 'ses_notice000002';
    const sink = await live(id);
    await store.appendEvents(id, [['stream.event', '{"n":1}']]);
    await sink.wait(1);
    // A writer that publishes nothing: the next notice's `prev` is this entry, not the hub's cursor.
    await cmd.xadd(sessionKeys(id).events, '*', 't', 'stream.event', 'd', '{"n":2}', 'at', '0');
    const before = await xranges(admin);
    await store.appendEvents(id, [['stream.event', '{"n":3}']]);
    await sink.wait(3);
    assert.ok((await xranges(admin)) > before, 'the gap was read from the log');
    assert.deepEqual(
      sink.got.map((e) => JSON.parse(e.json).data.n),
      [1, 2, 3],
    );
  });

  it('sends only the newest id for events too big to carry, and the relay reads them', async () => {
    const id = 'ses_notice000003';
    const sink = await live(id);
    const { seen, spy } = await spyNotices(id);
    const big = JSON.stringify({ text: 'x'.repeat(NOTICE_MAX_BYTES + 10) });
    await store.appendEvents(id, [
      ['stream.event', '{"small":true}'],
      ['stream.event', big],
    ]);
    await store.appendEvents(id, [['stream.event', '{"small":2}']]);
    await sink.wait(3);
    await until(() => seen.length >= 2);
    spy.disconnect();
    const notices = seen.map(parseNotice);
    assert.equal(notices[0]?.kind, 'newest', 'too big: the newest id only');
    assert.equal(notices[1]?.kind, 'events');
    assert.equal(sink.got[1]!.json.length > NOTICE_MAX_BYTES, true);
    assert.deepEqual(JSON.parse(sink.got[2]!.json).data, { small: 2 });
  });

  it('carries the events of a session change (apply), revisions included', async () => {
    const id = 'ses_notice000004';
    const sink = await live(id);
    const { seen, spy } = await spyNotices(id);
    await store.apply(
      id,
      { create: true },
      { hset: { status: 'idle' }, events: [['session.created', '{"revision":null}', 'rev']] },
    );
    await sink.wait(1);
    await until(() => seen.length >= 1);
    spy.disconnect();
    const n = parseNotice(seen[0]!);
    assert.equal(n.kind, 'events');
    const ev = JSON.parse(sink.got[0]!.json);
    assert.equal(ev.type, 'session.created');
    assert.equal(ev.revision, 1);
    assert.deepEqual(ev.data, { revision: 1 });
  });

  it('parses notices strictly: anything malformed means "read the log"', () => {
    assert.deepEqual(parseNotice(''), { kind: 'newest', newest: '' });
    assert.deepEqual(parseNotice('5-0'), { kind: 'newest', newest: '5-0' });
    assert.equal(parseNotice('E\n1-0\n2-0\n2-0\nt\n0\n0\n{}').kind, 'events');
    assert.equal(
      parseNotice('E\n1-0\n3-0\n2-0\nt\n0\n0\n{}').kind,
      'newest',
      'newest must be the last event',
    );
    assert.equal(parseNotice('E\n1-0\n2-0\n2-0\nt\n0\n0').kind, 'newest', 'a field missing');
  });
});
