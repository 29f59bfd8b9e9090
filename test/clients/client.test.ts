import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import ts from 'typescript';
import { WebSocket } from 'ws';
import {
  ApiError,
  ConflictError,
  NotFoundError,
  RevisionMismatchError,
  SessionsClient,
  WaitTimeoutError,
  verifyWebhook,
  type ConnectionState,
  type Event,
} from '../../packages/client/src/index.js';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { CLIENT_TYPES, OPENAPI_JSON } from '../helpers/openapi.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { clientFor, startHarness, type Harness } from '../helpers/service.js';

const KEY = 'client-key-1';

/** Every event of the session's log, read page by page over REST (the reference a follower is compared with). */
async function wholeLog(client: SessionsClient, id: string): Promise<Event[]> {
  const all: Event[] = [];
  let after = '0';
  for (;;) {
    const page = await client.listEvents(id, { after, limit: 1000 });
    all.push(...page.data);
    if (!page.has_more) return all;
    after = page.next_cursor!;
  }
}

/** A WebSocket that counts the connections it opens, and can cut them all from the client side. */
function countingWebSocket() {
  const sockets: WebSocket[] = [];
  class Counting extends WebSocket {
    constructor(url: string, protocols?: string | string[]) {
      super(url, protocols);
      sockets.push(this);
    }
  }
  return { Counting, sockets };
}

const ids = (events: Event[]) => events.map((e) => e.id);
const dups = (list: string[]) => list.filter((x, i) => list.indexOf(x) !== i);

/** A reply long enough to stream for a while: many text deltas, `delayMs` apart. */
const longText = (words: number) => Array.from({ length: words }, (_, i) => `word${i}`).join(' ') + '. Done.';

describe('typed client', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY},other:other-key` } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('follows a session across server-side socket kills: nothing missed, nothing twice', async () => {
    h.fake.enqueue(
      toolCalls([toolUse('calculate_sum', { a: 2, b: 3 }, 'toolu_c1')], { eventDelayMs: 5 }),
      text(longText(150), { eventDelayMs: 10 }),
    );
    const { Counting, sockets } = countingWebSocket();
    const client = new SessionsClient({ baseUrl: h.service.url, apiKey: KEY, WebSocket: Counting });
    const s = await client.createSession({ input: 'Add 2 and 3, then talk.', tools: ['calculate_sum'] });
    assert.equal(s.status, 'running');

    // Each kill cuts the connection the follow reads at that moment, and the test goes on until the follow has
    // reconnected after the last one. Both are told by the follow's own connection events, not by timing: on a
    // busy machine events come in bursts and a reconnection takes a while, so the event a kill is due at may be one
    // the follow received before the previous kill took effect (nothing left to cut: the kill waits for the next
    // connection to open), and the last kill may cut a connection that had already carried every event up to
    // `idle` (the follow reconnects once it has yielded them, then the test ends).
    let connected = false;
    let opens = 0;
    let due = 0;
    let kills = 0;
    let idle = false;
    const done = new AbortController();
    const caughtUp = () => idle && due === 0 && opens === kills + 1;
    const onConnection = (state: ConnectionState) => {
      if (state === 'closed') connected = false;
      if (state !== 'open') return;
      opens++;
      connected = true;
      if (due > 0) kill();
      else if (caughtUp()) done.abort(new Error('followed to the end'));
    };
    const kill = () => {
      // Kill every server-side socket of the service: the client sees an abnormal close (1006).
      for (const ws of h.service.app.websocketServer.clients) ws.terminate();
      connected = false;
      kills++;
      due--;
    };

    const seen: Event[] = [];
    let deltas = 0;
    try {
      for await (const ev of client.follow(s.id, { onConnection, signal: done.signal })) {
        seen.push(ev);
        if (seen.length === 3) due++;
        // In the second turn's text (about 56 stream events, 10 ms apart): at its 10th and its 30th.
        const data = ev.data as { iteration?: number; status?: string };
        if (ev.type === 'stream.event' && data.iteration === 2 && [10, 30].includes(++deltas)) due++;
        if (due > 0 && connected) kill();
        if (ev.type === 'session.status' && data.status === 'idle') {
          idle = true;
          if (caughtUp()) break;
        }
      }
    } catch (err) {
      if (!done.signal.aborted || err !== done.signal.reason) throw err;
    }
    assert.equal(kills, 3, 'every kill cut a live connection');
    assert.ok(sockets.length >= 4, `reconnected after each kill (${sockets.length} connections)`);
    assert.deepEqual(dups(ids(seen)), [], 'nothing twice');
    const log = await wholeLog(client, s.id);
    const upTo = log.slice(0, log.findIndex((e) => e.id === seen.at(-1)!.id) + 1);
    assert.deepEqual(ids(seen), ids(upTo), 'exactly the log, in order');
    assert.deepEqual(seen, upTo, 'the same envelopes');
    assert.ok(seen.filter((e) => e.type === 'stream.event').length > 50, 'streamed deltas were followed');
  });

  it('resumes after a given event id, and ends after session.deleted', async () => {
    h.fake.enqueue(text('Short.'));
    const s = await h.client.createSession({ input: 'Hi' });
    const idle = await h.client.waitFor(s.id, 'idle', { timeoutMs: 15_000 });
    assert.equal(idle.stop_reason, 'end_turn');
    const log = await wholeLog(h.client, s.id);
    const mid = log[Math.floor(log.length / 2)]!;
    const rest: Event[] = [];
    const following = (async () => {
      for await (const ev of h.client.follow(s.id, { after: mid.id })) rest.push(ev);
    })();
    // Deleting ends the stream (session.deleted, then close 1000) and the iterator with it.
    while (rest.length < log.length - log.indexOf(mid) - 1) await new Promise((r) => setImmediate(r));
    await h.client.deleteSession(s.id);
    await following;
    const expected = log.slice(log.indexOf(mid) + 1);
    assert.deepEqual(ids(rest.slice(0, expected.length)), ids(expected));
    assert.equal(rest.at(-1)!.type, 'session.deleted');
  });

  it('follow() read slower than it receives is cut at maxBufferedBytes and resumes: every event once, in order', async () => {
    h.fake.enqueue(text(Array.from({ length: 300 }, (_, i) => `word${i}`).join(' ')));
    const s = await h.client.createSession({ input: 'Long' });
    await h.client.waitFor(s.id, 'idle', { timeoutMs: 15_000 });
    const log = await wholeLog(h.client, s.id);
    assert.ok(log.length > 50, `${log.length} events`);
    const closes: number[] = [];
    const got: Event[] = [];
    for await (const ev of h.client.follow(s.id, {
      maxBufferedBytes: 2000,
      onConnection: (state, info) => void (state === 'closed' && info && closes.push(info.code)),
    })) {
      got.push(ev);
      if (got.length === log.length) break;
      await new Promise((r) => setImmediate(r));
    }
    assert.deepEqual(ids(got), ids(log));
    assert.ok(closes.includes(4000), `closed behind at least once: ${closes.join(',')}`);
  });

  it('follow() tells onConnection of each socket: connecting, open, closed with its code', async () => {
    h.fake.enqueue(text('Short.'));
    const s = await h.client.createSession({ input: 'Hi' });
    await h.client.waitFor(s.id, 'idle', { timeoutMs: 15_000 });
    const states: string[] = [];
    const onConnection = (state: string, info?: { code: number }) =>
      states.push(info ? `${state} ${info.code}` : state);
    let killed = false;
    const following = (async () => {
      for await (const ev of h.client.follow(s.id, { onConnection })) {
        if (!killed && ev.type === 'session.status') {
          killed = true;
          // A server-side kill: the client sees 1006 and reconnects after the last event.
          for (const ws of h.service.app.websocketServer.clients) ws.terminate();
        }
      }
    })();
    while (states.filter((x) => x === 'open').length < 2) await new Promise((r) => setTimeout(r, 5));
    await h.client.deleteSession(s.id);
    await following;
    assert.deepEqual(states.slice(0, 4), ['connecting', 'open', 'closed 1006', 'connecting']);
    assert.equal(states[4], 'open');
  });

  it('readTimeoutMs: a GET without an answer is given up once, not retried', async () => {
    let gets = 0;
    const stalled = http.createServer((req) => {
      if (req.method === 'GET') gets++;
      // Never answers.
    });
    await new Promise<void>((resolve) => stalled.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(stalled.address() as AddressInfo).port}`;
      const client = new SessionsClient({ baseUrl: url, readTimeoutMs: 200 });
      const t0 = Date.now();
      await assert.rejects(client.getSession('ses_x'), (err: Error) => {
        assert.equal(err.name, 'ConnectionError');
        assert.match(err.message, /no answer in 200 ms/);
        return true;
      });
      assert.ok(Date.now() - t0 < 2000, 'given up after the timeout, without retries');
      assert.equal(gets, 1);
    } finally {
      stalled.closeAllConnections();
      await new Promise((resolve) => stalled.close(resolve));
    }
  });

  it('waitFor: resolves at once, on a status event, or times out; a deleted session is a NotFoundError', async () => {
    h.fake.enqueue(toolCalls([toolUse('lookup', { q: 'x' }, 'toolu_l1')]), text('Thanks.'));
    const lookup = { name: 'lookup', input_schema: { type: 'object' as const, properties: {} } };
    const s = await h.client.createSession({ input: 'Look it up', tools: [lookup] });
    const waiting = await h.client.waitFor(s.id, 'requires_action', { timeoutMs: 15_000 });
    assert.equal(waiting.required_action?.type, 'submit_tool_results');
    assert.equal((await h.client.waitFor(s.id, ['requires_action', 'idle'])).revision, waiting.revision);
    await assert.rejects(h.client.waitFor(s.id, 'idle', { timeoutMs: 300 }), WaitTimeoutError);
    // A signal aborted before the call ends it with its reason (not with the timeout).
    await assert.rejects(
      h.client.waitFor(s.id, 'idle', { timeoutMs: 2000, signal: AbortSignal.abort(new Error('gone')) }),
      /^Error: gone$/,
    );
    const done = h.client.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2, {
      timeoutMs: 15_000,
    });
    await h.client.putToolResult(s.id, 'toolu_l1', { content: 'found' });
    assert.equal((await done).stop_reason, 'end_turn');
    // Deleted while waitFor follows it (its socket open, so the end comes as `session.deleted`, not as a refused
    // read): a NotFoundError, as a read of the session now answers. The rejection is awaited from the start: it
    // may come while the delete is still being answered.
    const { Counting, sockets } = countingWebSocket();
    const watcher = new SessionsClient({ baseUrl: h.service.url, apiKey: KEY, WebSocket: Counting });
    const gone = assert.rejects(watcher.waitFor(s.id, 'running'), (err) => {
      assert.ok(err instanceof NotFoundError, String(err));
      assert.equal(err.status, 404);
      assert.equal(err.code, 'session_not_found');
      return true;
    });
    while (sockets.length === 0) await new Promise((r) => setImmediate(r));
    const ws = sockets[0]!;
    if (ws.readyState !== WebSocket.OPEN) await new Promise((r) => ws.once('open', r));
    await h.client.deleteSession(s.id);
    await gone;
  });

  it('follow() from a cursor the service refuses throws its ApiError after one connection, not retrying', async () => {
    const s = await h.client.createSession({ input: 'x', start: false });
    const refusals = [
      ['9999999999999-0', 'invalid_cursor'],
      ['garbage', 'invalid_request'],
    ] as const;
    for (const [after, code] of refusals) {
      let connecting = 0;
      // A second connection is a retry of the refused cursor: the follow is ended with an error saying so.
      const retried = new AbortController();
      const onConnection = (state: ConnectionState) => {
        if (state === 'connecting' && ++connecting > 1) retried.abort(new Error(`retried after=${after}`));
      };
      await assert.rejects(
        (async () => {
          for await (const _ of h.client.follow(s.id, { after, onConnection, signal: retried.signal }));
        })(),
        (err) => {
          assert.ok(ApiError.is(err, code), `after=${after}: ${String(err)}`);
          assert.equal(err.status, 400);
          return true;
        },
      );
      assert.equal(connecting, 1);
    }
  });

  it('every mutation takes MutationOptions.signal: aborted, it rejects with it and changes nothing', async () => {
    const s = await h.client.createSession({ input: 'x', start: false });
    const sent: Request[] = [];
    const client = new SessionsClient({
      baseUrl: h.service.url,
      apiKey: KEY,
      fetch: (req) => {
        sent.push(req);
        return fetch(req);
      },
    });
    const o = { signal: AbortSignal.abort() };
    const id = s.id;
    const mutations: Record<string, () => Promise<unknown>> = {
      createSession: () => client.createSession({ input: 'y', start: false }, o),
      addMessage: () => client.addMessage(id, { text: 'y' }, o),
      decideToolCall: () => client.decideToolCall(id, 'toolu_x', { decision: 'approve' }, o),
      putToolResult: () => client.putToolResult(id, 'toolu_x', { content: 'y' }, o),
      submitToolResults: () =>
        client.submitToolResults(id, { results: [{ tool_use_id: 'toolu_x', content: 'y' }] }, o),
      updateSession: () => client.updateSession(id, { metadata: { a: 'b' } }, o),
      continueSession: () => client.continueSession(id, o),
      retrySession: () => client.retrySession(id, {}, o),
      cancelSession: () => client.cancelSession(id, o),
      resumeSession: () => client.resumeSession(id, o),
      forkSession: () => client.forkSession(id, { at_iteration: 0 }, o),
      compactSession: () => client.compactSession(id, {}, o),
      deleteSession: () => client.deleteSession(id, o),
    };
    for (const [name, call] of Object.entries(mutations)) {
      await assert.rejects(call(), (err: Error) => err.name === 'AbortError', name);
    }
    assert.equal(sent.length, Object.keys(mutations).length);
    assert.ok(
      sent.every((r) => r.signal.aborted),
      'each request carried the aborted signal',
    );
    const now = await h.client.getSession(id);
    assert.equal(now.revision, s.revision);
    assert.deepEqual(now.metadata, s.metadata);
  });

  it('mints a client token without ttl_s through client.api: the service defaults it to 900 s', async () => {
    const s = await h.client.createSession({ input: 'x', start: false });
    // Compiles only while the generated request type leaves `ttl_s` optional (`npm run typecheck`).
    const { data, response } = await h.client.api.POST('/v1/client-tokens', {
      body: { session_id: s.id, scopes: ['read'] },
    });
    assert.equal(response.status, 201);
    assert.equal(Date.parse(data!.expires_at) - Date.parse(data!.created_at), 900_000);
  });

  it("throws typed errors with the contract's codes", async () => {
    await assert.rejects(h.client.getSession('ses_doesnotexist0000'), (err) => {
      assert.ok(err instanceof NotFoundError);
      assert.equal(err.status, 404);
      assert.equal(err.code, 'session_not_found');
      return true;
    });
    const s = await h.client.createSession({ input: 'x', start: false });
    await assert.rejects(h.client.addMessage(s.id, { text: 'y' }, { ifMatch: s.revision + 5 }), (err) => {
      assert.ok(err instanceof RevisionMismatchError);
      assert.equal(err.code, 'revision_mismatch');
      assert.equal(err.revision, s.revision);
      return true;
    });
    await assert.rejects(h.client.resumeSession(s.id), (err) => err instanceof ConflictError);
    await assert.rejects(h.client.createSession({ input: 5 } as never), (err) => {
      assert.ok(ApiError.is(err, 'invalid_request'));
      assert.equal((err.details as Array<{ path: string }>)[0]!.path, '/input');
      return true;
    });
    // Another tenant's session does not exist for this key; a wrong key is 401.
    await assert.rejects(clientFor(h.service.url, 'other-key').getSession(s.id), NotFoundError);
    await assert.rejects(clientFor(h.service.url, 'nope').getSession(s.id), (err) =>
      ApiError.is(err, 'unauthorized'),
    );
    await assert.rejects(
      (async () => {
        for await (const _ of clientFor(h.service.url, 'nope').follow(s.id)) break;
      })(),
      (err) => ApiError.is(err, 'unauthorized'),
    );
  });

  it('retries 429 after Retry-After with one Idempotency-Key: the session is created once', async () => {
    // A real HTTP hop in front of the service: the first POST gets 429 with Retry-After: 1, the rest pass.
    const seen: Array<{ method: string; key: string | undefined; at: number }> = [];
    const target = new URL(h.service.url);
    const proxy = http.createServer((req, res) => {
      seen.push({
        method: req.method!,
        key: req.headers['idempotency-key'] as string | undefined,
        at: Date.now(),
      });
      if (req.method === 'POST' && seen.filter((x) => x.method === 'POST').length === 1) {
        req.resume();
        res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' });
        return res.end(JSON.stringify({ error: { code: 'rate_limited', message: 'Too many requests.' } }));
      }
      const up = http.request(
        { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
        (r) => {
          res.writeHead(r.statusCode!, r.headers);
          r.pipe(res);
        },
      );
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    try {
      const port = (proxy.address() as AddressInfo).port;
      const client = clientFor(`http://127.0.0.1:${port}`, KEY);
      const before = (await h.client.listSessions({ limit: 100 })).data.length;
      const s = await client.createSession({ input: 'once', start: false, metadata: { n: 1 } });
      const posts = seen.filter((x) => x.method === 'POST');
      assert.equal(posts.length, 2);
      assert.ok(posts[0]!.key && posts[0]!.key === posts[1]!.key, 'one Idempotency-Key for both attempts');
      assert.ok(posts[1]!.at - posts[0]!.at >= 1000, 'waited for Retry-After');
      // The same key again (an answer lost on the way): the service answers the first session, no second one.
      const again = await client.api.POST('/v1/sessions', {
        body: { input: 'once', start: false, metadata: { n: 1 } },
        headers: { 'idempotency-key': posts[0]!.key },
      });
      assert.equal(again.response.headers.get('idempotent-replayed'), 'true');
      assert.equal(again.data?.id, s.id);
      assert.equal((await h.client.listSessions({ limit: 100 })).data.length, before + 1);
    } finally {
      await new Promise((r) => proxy.close(r));
    }
  });

  it('verifyWebhook checks Standard Webhooks signatures and returns the event', () => {
    const secret = `whsec_${Buffer.from('a secret of 24 bytes!!!!').toString('base64')}`;
    const body = JSON.stringify({
      id: '1-0',
      session_id: 'ses_x',
      type: 'session.status',
      at: new Date().toISOString(),
      revision: 3,
      data: { status: 'idle' },
    });
    const now = new Date();
    const signature = new Webhook(secret).sign('msg_1', now, body);
    const headers = {
      'webhook-id': 'msg_1',
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': signature,
    };
    assert.equal(verifyWebhook(secret, body, headers).type, 'session.status');
    assert.equal(verifyWebhook(secret, body, new Headers(headers)).revision, 3);
    assert.throws(() => verifyWebhook(secret, body.replace('idle', 'failed'), headers), /signature/i);
    assert.throws(() => verifyWebhook(secret, body, { ...headers, 'webhook-id': 'msg_2' }), /signature/i);
  });
});

describe('typed client across a service restart', () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let svc: ServiceProcess | undefined;
  before(async () => {
    redis = await startTestRedis();
    fake = await startFakeAnthropic();
  });
  after(async () => {
    await svc?.kill();
    await fake?.close();
    await redis?.stop();
  });

  it('a follower reconnects to the restarted process and sees every event once, and the 503 of a store outage is retried', async () => {
    const env = (port: string) =>
      serviceEnv(redis.url, fake.url, { API_KEYS: `acme:${KEY}`, LEASE_TTL_MS: '2000', PORT: port });
    svc = await spawnService(env('0'), { name: 'first' });
    const port = new URL(svc.url).port;
    // The run streams slowly, so the process dies in the middle of a turn.
    fake.enqueue(text(longText(80), { eventDelayMs: 40 }), text(longText(80), { eventDelayMs: 5 }));
    const client = clientFor(svc.url, KEY);
    const s = await client.createSession({ input: 'Talk for a while.' });
    const seen: Event[] = [];
    let restarted = false;
    for await (const ev of client.follow(s.id)) {
      seen.push(ev);
      if (!restarted && ev.type === 'stream.event' && seen.length >= 20) {
        restarted = true;
        await svc.kill();
        // Same port: the follower keeps its URL; the new process takes the run over once the lease expires.
        svc = await spawnService(env(port), { name: 'second' });
      }
      if (ev.type === 'session.status' && (ev.data as { status: string }).status === 'idle') break;
    }
    assert.ok(restarted);
    assert.deepEqual(dups(ids(seen)), [], 'nothing twice');
    const log = await wholeLog(client, s.id);
    assert.deepEqual(ids(seen), ids(log.slice(0, seen.length)), 'nothing missed, in order');
    assert.equal(seen.at(-1)!.id, log.filter((e) => e.type === 'session.status').at(-1)!.id);

    // Redis goes away: a create is answered 503 store_unavailable (Retry-After: 2) and retried until Redis is back.
    await redis.stop();
    const attempts: number[] = [];
    const recording = new SessionsClient({
      baseUrl: svc.url,
      apiKey: KEY,
      WebSocket,
      maxRetries: 10,
      fetch: async (req) => {
        const res = await fetch(req);
        attempts.push(res.status);
        if (res.status === 503 && attempts.length === 1) await redis.restart();
        return res;
      },
    });
    const created = await recording.createSession({ input: 'after the outage', start: false });
    assert.equal(attempts[0], 503);
    assert.equal(attempts.at(-1), 201);
    assert.equal((await client.getSession(created.id)).id, created.id);
  });
});

describe('the generated types', () => {
  it('make a field optional exactly when the document does not require it, request schemas with defaults included', () => {
    const doc = JSON.parse(readFileSync(OPENAPI_JSON, 'utf8')) as {
      components: { schemas: Record<string, { properties?: Record<string, unknown>; required?: string[] }> };
    };
    const source = ts.createSourceFile(
      CLIENT_TYPES,
      readFileSync(CLIENT_TYPES, 'utf8'),
      ts.ScriptTarget.Latest,
    );
    const members = (node: ts.Node | undefined) =>
      node && ts.isTypeLiteralNode(node) ? node.members.filter(ts.isPropertySignature) : [];
    const named = (list: ts.PropertySignature[], name: string) =>
      list.find((m) => m.name.getText(source).replace(/^'|'$/g, '') === name);
    const components = source.statements.find(
      (n): n is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(n) && n.name.text === 'components',
    );
    const schemas = members(named(components?.members.filter(ts.isPropertySignature) ?? [], 'schemas')?.type);
    let checked = 0;
    const wrong: string[] = [];
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      if (!schema.properties) continue;
      // Object schemas become type literals; the others (unions, intersections) are left to the compiler.
      const fields = members(named(schemas, name)?.type);
      for (const field of Object.keys(schema.properties)) {
        const sig = named(fields, field);
        if (!sig) continue;
        checked++;
        const optional = sig.questionToken !== undefined;
        if (optional === (schema.required ?? []).includes(field)) wrong.push(`${name}.${field}`);
      }
    }
    assert.ok(checked > 100, `checked ${checked} fields`);
    assert.deepEqual(wrong, []);
  });
});
