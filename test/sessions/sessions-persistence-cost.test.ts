import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { toolCall } from '../fake/script.js';

/** Bytes of a command as RESP on the wire (what `total_net_input_bytes` counts for it). */
function respBytes(args: string[]): number {
  let n = `*${args.length}\r\n`.length;
  for (const a of args) n += `$${Buffer.byteLength(a)}\r\n`.length + Buffer.byteLength(a) + 2;
  return n;
}

/** `n` earlier messages, alternating user/assistant, ending with an assistant turn; ~400 bytes each. */
function history(n: number) {
  const filler = 'lorem ipsum dolor sit amet '.repeat(15);
  return Array.from({ length: n }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `${i}: ${filler}`,
  }));
}

describe('persistence cost of an iteration', () => {
  let h: Harness;
  let probe: Redis;
  before(async () => {
    h = await startHarness();
    probe = new Redis(h.redis.url);
  });
  after(async () => {
    probe?.disconnect();
    await h?.close();
  });

  const inputBytes = async () => {
    const info = await probe.info('stats');
    return Number(/total_net_input_bytes:(\d+)/.exec(info)![1]);
  };

  /**
   * Redis input bytes for one run of exactly one persisted iteration (the follow-up message, the turn, its tool
   * result, the stop), on a session created with `earlier` messages. Our own INFO/HGET commands are subtracted.
   */
  async function measure(earlier: number): Promise<number> {
    const created = await h.api.post('/v1/sessions', {
      messages: history(earlier),
      tools: ['calculate_sum'],
      max_iterations: 1,
      start: false,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    assert.equal(created.body.message_count, earlier);
    // The same reply in every measurement: fixed tool_use id and usage.
    h.fake.enqueue(
      toolCall(
        'calculate_sum',
        { a: 1, b: 2 },
        { id: 'toolu_cost', usage: { input_tokens: 1000, output_tokens: 20 } },
      ),
    );
    const requestsBefore = h.fake.requests.length;
    const meta = `s:{${id}}`;
    const before = await inputBytes();
    const sent = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'next' });
    assert.equal(sent.status, 202, JSON.stringify(sent.body));
    let polls = 0;
    for (;;) {
      polls++;
      const status = await probe.hget(meta, 'status');
      if (status === 'idle' || status === 'failed') break;
      await new Promise((r) => setTimeout(r, 5));
    }
    const afterBytes = await inputBytes();
    const own = respBytes(['info', 'stats']) + polls * respBytes(['hget', meta, 'status']);
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(s.stop_reason, 'max_iterations');
    assert.equal(s.iteration, 1);
    assert.equal(s.message_count, earlier + 3, 'the follow-up, the reply, its tool result');
    assert.equal(h.fake.requests.length, requestsBefore + 1);
    assert.equal(h.fake.requests.at(-1)!.messages.length, earlier + 1);
    return afterBytes - before - own;
  }

  it('bytes written for an iteration do not grow with the history (10 vs 200 earlier messages)', async (t) => {
    await measure(4); // warm-up: loads the Lua scripts (EVAL of the whole script on first use)
    const small = await measure(10);
    const large = await measure(200);
    const small2 = await measure(10);
    t.diagnostic(`input bytes per iteration: 10 msgs → ${small}, ${small2}; 200 msgs → ${large}`);
    const historyBytes = JSON.stringify(history(200)).length;
    assert.ok(
      large / Math.min(small, small2) < 1.5,
      `200 earlier messages: ${large} B vs 10: ${small} B (the 200-message history is ${historyBytes} B)`,
    );
    assert.ok(large - Math.min(small, small2) < 4096, `grew by ${large - small} B`);
  });
});
