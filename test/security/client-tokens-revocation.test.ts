/**
 * Spec §7.2: `DELETE /v1/client-tokens/:id` revokes a token "at once, on every replica", and deleting the session
 * revokes its tokens. A stream opened with the token (WebSocket, SSE, chat stream) on another replica ends at the
 * revocation itself — the `client_token.revoked` event naming its token, or `session.deleted` — and is sent nothing
 * newer, without waiting for the periodic re-check (STREAM_HEARTBEAT_MS, 15 s by default here).
 * Two services on one Redis: A revokes, B serves the streams.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { hang } from '../fake/script.js';
import { connectSse, connectWs, type Envelope } from '../fixtures/event-clients.js';
import { sseDataLines } from '../helpers/chat.js';

const KEYS = 'acme:key-acme';

/**
 * `p`, or a rejection naming `what` after `ms`: the streams must end on the revocation's event, well before the
 * periodic re-check (15 s) would end them.
 */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Nothing after the event that ended the stream: it is the last event received. */
function endsWith(events: Envelope[], type: string, what: string): Envelope {
  const last = events.at(-1);
  assert.equal(last?.type, type, `${what}: ${events.map((e) => e.type).join(', ')}`);
  return last!;
}

describe(
  'a revoked client token ends its open streams at once, on another replica',
  { timeout: 120_000 },
  () => {
    let a: Harness;
    let b: Harness;
    before(async () => {
      a = await startHarness({ env: { API_KEYS: KEYS } });
      b = await startHarness({ env: { API_KEYS: KEYS }, redis: a.redis, fakeServer: a.fake });
    });
    after(async () => {
      await b?.close();
      await a?.close();
    });

    /** A session running a turn that hangs upstream (so a chat stream is active), and a read+message token of it. */
    async function running() {
      a.fake.enqueue(hang());
      const id = (await a.api.post('/v1/sessions', { input: 'Hi' })).body.id as string;
      await a.api.waitStatus(id, 'running');
      const minted = await a.api.post('/v1/client-tokens', { session_id: id, scopes: ['read', 'message'] });
      assert.equal(minted.status, 201);
      return { id, tokenId: minted.body.id as string, token: minted.body.token as string };
    }

    /** The three streams a browser holds with token `t` on B, each past its replay of the log. */
    async function streams(id: string, t: string) {
      const ws = await connectWs(b.service.url, id, { protocolToken: t });
      const sse = await connectSse(b.service.url, id, { token: t });
      assert.equal(sse.status, 200);
      const chat = await fetch(`${b.service.url}/v1/chat/${id}/stream`, {
        headers: { authorization: `Bearer ${t}` },
      });
      assert.equal(chat.status, 200);
      const chatText = chat.text();
      await ws.waitEvent((e) => e.type === 'client_token.created', 'WS replay');
      await sse.waitEvent((e) => e.type === 'client_token.created', 'SSE replay');
      return { ws, sse, chatText };
    }

    it('DELETE on A: the WebSocket, SSE and chat streams on B end at client_token.revoked, nothing after', async () => {
      const { id, tokenId, token } = await running();
      const { ws, sse, chatText } = await streams(id, token);
      assert.equal((await a.api.req('DELETE', `/v1/client-tokens/${tokenId}`)).status, 200);
      // Events after the revocation: a follower of the revoked token gets none of them.
      assert.equal((await a.api.post('/v1/client-tokens', { session_id: id, scopes: ['read'] })).status, 201);
      assert.equal(
        (await a.api.req('PATCH', `/v1/sessions/${id}`, { metadata: { k: 'after' } })).status,
        200,
      );

      const closed = await within(ws.closed, 5000, 'the WebSocket closed');
      assert.equal(closed.code, 4401);
      assert.equal(closed.reason, 'token_revoked');
      const revoked = endsWith(ws.events.items, 'client_token.revoked', 'WebSocket');
      assert.equal(revoked.data.id, tokenId);
      const error = ws.frames.items.find((f) => f.type === 'error');
      assert.equal(error?.error.code, 'unauthorized');
      const end = ws.frames.items.find((f) => f.type === 'end');
      assert.deepEqual(end, { type: 'end', reason: 'token_revoked', final: true, last_event_id: revoked.id });

      await within(sse.ended, 5000, 'the SSE stream ended');
      assert.equal(endsWith(sse.events.items, 'client_token.revoked', 'SSE').data.id, tokenId);
      const records = sse.records.items.map((r) => r.event ?? 'message');
      assert.deepEqual(records.slice(-3), ['client_token.revoked', 'error', 'end']);
      assert.match(sse.records.items.at(-2)!.data, /"code":"unauthorized"/);
      assert.deepEqual(JSON.parse(sse.records.items.at(-1)!.data), {
        type: 'end',
        reason: 'token_revoked',
        final: true,
        last_event_id: revoked.id,
      });

      const data = sseDataLines(await within(chatText, 5000, 'the chat stream ended'));
      assert.equal(data.at(-1), '[DONE]');
      const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as { type: string; errorText?: string });
      assert.match(chunks.find((c) => c.type === 'error')?.errorText ?? '', /^unauthorized:/);
      assert.equal(chunks.at(-1)?.type, 'finish');
      await a.api.post(`/v1/sessions/${id}/cancel`);
    });

    it('the session deleted on A: its token streams on B end at session.deleted', async () => {
      const { id, token } = await running();
      const { ws, sse, chatText } = await streams(id, token);
      assert.equal((await a.api.req('DELETE', `/v1/sessions/${id}`)).status, 200);

      const closed = await within(ws.closed, 5000, 'the WebSocket closed');
      assert.equal(closed.code, 1000);
      assert.equal(closed.reason, 'session_deleted');
      endsWith(ws.events.items, 'session.deleted', 'WebSocket');
      await within(sse.ended, 5000, 'the SSE stream ended');
      endsWith(sse.events.items, 'session.deleted', 'SSE');
      const data = sseDataLines(await within(chatText, 5000, 'the chat stream ended'));
      assert.equal(data.at(-1), '[DONE]');
      assert.ok(
        data.some((d) => d.includes('"session_deleted"')),
        data.join('\n'),
      );
    });
  },
);
