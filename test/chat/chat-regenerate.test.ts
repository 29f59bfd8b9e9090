/**
 * The chat's `regenerate-message` and the iteration records: the records it trims and the counters it moves agree
 * with what POST /retry, GET /iterations and fork read, after a replaced history and past a skipped compaction.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type UIMessage } from 'ai';
import { availableTools, text, toolCall } from '../fake/script.js';
import { PlainChat, chatTransport } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'regen-key-1';
const params = { model: 'claude-test', max_tokens: 256 };
const textOf = (m: UIMessage | undefined) =>
  (m?.parts ?? []).flatMap((p) => (p.type === 'text' ? [p.text] : [])).join('');

describe('chat regenerate: the iteration records', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(() => h?.close());

  const transport = () => chatTransport(h.service.url, KEY);
  async function session(body: Record<string, unknown> = {}) {
    const r = await h.api.post('/v1/sessions', { params, start: false, ...body });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  }
  const records = async (id: string) => (await h.api.get(`/v1/sessions/${id}/iterations`)).body.data as any[];

  test('after a PUT …/messages, the regenerated reply can be retried (POST /retry) and the older records stay', async () => {
    const id = await session();
    const chat = new PlainChat({ id, transport: transport() });
    h.fake.enqueue(text('A1'), text('A2'));
    let done = chat.nextFinish();
    await chat.sendMessage({ text: 'one' });
    await done;
    done = chat.nextFinish();
    await chat.sendMessage({ text: 'two' });
    await done;
    assert.equal((await records(id)).length, 2);
    // The history replaced by a shorter one (replaced_at = 2: both records address the old history).
    const put = await h.api.req('PUT', `/v1/sessions/${id}/messages`, {
      messages: [
        { role: 'user', content: 'x' },
        { role: 'assistant', content: 'X' },
      ],
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    // A new chat on the replaced history, one more answer (record 3), then regenerate it.
    const msgs = (await h.api.get(`/v1/chat/${id}/messages`)).body as UIMessage[];
    const chat2 = new PlainChat({ id, transport: transport(), messages: msgs });
    h.fake.enqueue(text('Y1'), text('Y2'));
    done = chat2.nextFinish();
    await chat2.sendMessage({ text: 'y' });
    await done;
    assert.equal((await records(id)).length, 3);
    done = chat2.nextFinish();
    await chat2.regenerate();
    await done;
    assert.equal(textOf(chat2.messages.at(-1)), 'Y2');
    const kept = (await records(id)).length;
    // The new reply is the session's newest: POST /retry sends it again.
    h.fake.enqueue(text('Y3'));
    const retry = await h.api.post(`/v1/sessions/${id}/retry`, {});
    assert.equal(retry.status, 202, JSON.stringify(retry.body));
    // Only the regenerated answer's record was dropped: the replaced history's records are the session's own turns.
    assert.equal(kept, 3, 'records of the replaced history were trimmed as if cut');
  });

  test('the newest answer after a tool change (a `system` message before it) is made again, the change kept', async () => {
    const id = await session({ tools: ['get_weather'] });
    const chat = new PlainChat({ id, transport: transport() });
    h.fake.enqueue(text('A1'), text('A2'));
    let done = chat.nextFinish();
    await chat.sendMessage({ text: 'one' });
    await done;
    const patch = await h.api.req('PATCH', `/v1/sessions/${id}`, { tools: ['get_weather', 'calculate_sum'] });
    assert.equal(patch.status, 200, JSON.stringify(patch.body));
    done = chat.nextFinish();
    await chat.sendMessage({ text: 'two' });
    await done;
    const roles = async () =>
      ((await h.api.get(`/v1/sessions/${id}/messages`)).body.data as any[]).map((m) => m.role);
    assert.deepEqual(await roles(), ['user', 'assistant', 'user', 'system', 'assistant']);
    h.fake.enqueue(text('A3'));
    const sent = h.fake.requests.length;
    done = chat.nextFinish();
    await chat.regenerate();
    await done;
    assert.equal(textOf(chat.messages.at(-1)), 'A3');
    // The change stays where it was; the new runner adds the added server tool again (docs/API.md: one more
    // `tool_addition` per new runner), then the answer.
    assert.deepEqual(await roles(), ['user', 'assistant', 'user', 'system', 'system', 'assistant']);
    // The rerun's request ends with the user turn "two" and the changes the model was told of, as POST /retry's does.
    const req = h.fake.requests.slice(sent).find((r) => r.body.messages)!;
    const tail = (req.body.messages as any[]).slice(-3);
    assert.deepEqual(
      tail.map((m) => m.role),
      ['user', 'system', 'system'],
    );
    assert.match(JSON.stringify(tail[0].content), /two/);
  });

  test('an answer made again that cuts a tool change told during its run tells the change again', async () => {
    const id = await session({ tools: ['calculate_sum'] });
    const chat = new PlainChat({ id, transport: transport() });
    let n = 0;
    h.fake.setHandler(async () => {
      n++;
      if (n === 1) return toolCall('calculate_sum', { a: 1, b: 2 });
      if (n === 2) {
        // Lands while turn 2 is in flight: the change is told before turn 3, inside the answer.
        const p = await h.api.req('PATCH', `/v1/sessions/${id}`, { tools: ['get_weather'] });
        assert.equal(p.status, 200, JSON.stringify(p.body));
        return toolCall('calculate_sum', { a: 3, b: 4 });
      }
      return text(`Done ${n}.`);
    });
    try {
      let done = chat.nextFinish();
      await chat.sendMessage({ text: 'add twice' });
      await done;
      const sent = h.fake.requests.length;
      done = chat.nextFinish();
      await chat.regenerate();
      await done;
      assert.equal(textOf(chat.messages.at(-1)), `Done ${n}.`);
      // The rerun's runner sends the session's first set as `tools` (its base): the change is told again, so
      // calculate_sum is not offered.
      const first = h.fake.requests[sent]!;
      assert.deepEqual([...availableTools(first).keys()], ['get_weather']);
    } finally {
      h.fake.setHandler(null);
    }
  });

  test("a skipped compaction after the answer: the answer's records go with it", async () => {
    const id = await session();
    const chat = new PlainChat({ id, transport: transport() });
    h.fake.enqueue(text('A1'));
    let done = chat.nextFinish();
    await chat.sendMessage({ text: 'one' });
    await done;
    // A compaction asked for while idle, whose reply has no summary: a record (reply_index -1) after the answer.
    h.fake.enqueue({ type: 'message', content: [{ type: 'compaction', content: null }] } as any);
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`, {})).status, 202);
    await h.api.waitFor(id, (x) => x.status === 'idle' && !x.compaction_pending);
    const recs = await records(id);
    assert.deepEqual(
      recs.map((r) => [r.kind ?? 'turn', r.reply_index]),
      [
        ['turn', 1],
        ['compaction', -1],
      ],
    );
    h.fake.enqueue(text('A2'));
    done = chat.nextFinish();
    await chat.regenerate();
    await done;
    assert.equal(textOf(chat.messages.at(-1)), 'A2');
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    const after = await records(id);
    // The first answer's record (reply_index 1) is gone: one turn record, for the answer the history holds.
    const turns = after.filter((r) => r.kind !== 'compaction');
    assert.equal(
      turns.length,
      1,
      `stale record of the dropped answer kept: ${JSON.stringify(after.map((r) => [r.kind, r.reply_index, r.iteration]))}`,
    );
    assert.equal(s.iteration, 1);
  });
});
