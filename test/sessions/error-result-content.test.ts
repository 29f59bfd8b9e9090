/**
 * An `is_error` tool result without content: the Messages API refuses it ("content cannot be empty if `is_error` is
 * true", taught to the fake), and a history holding one fails every later turn. A client's result or history
 * holding one is refused (400); a tool's own empty error (a chat's empty `errorText` here) is given a text.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { lastAssistantMessageIsCompleteWithToolCalls } from 'ai';
import { text, toolCall } from '../fake/script.js';
import { PlainChat, chatTransport } from '../helpers/chat.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'error-result-content-key';
const lookup = {
  name: 'lookup',
  description: 'Look something up.',
  input_schema: { type: 'object' as const, properties: { q: { type: 'string' } } },
};

describe('an error result without content', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  /** A session waiting for its client's result of `toolu_e`. */
  const waiting = async () => {
    h.fake.enqueue(toolCall('lookup', { q: 'x' }, { id: 'toolu_e' }), text('Noted.'));
    const r = await h.api.post('/v1/sessions', { input: 'look it up', tools: [lookup] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await h.api.waitStatus(r.body.id, 'requires_action');
    return r.body.id as string;
  };

  it("a client's result, one or a batch, is refused with 400 naming its content; a result with content is taken", async () => {
    const id = await waiting();
    for (const content of ['', []]) {
      const one = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_e`, {
        content,
        is_error: true,
      });
      assert.equal(one.status, 400, JSON.stringify(one.body));
      assert.equal(one.body.error.code, 'invalid_request');
      assert.deepEqual(
        one.body.error.details.map((d: { path: string }) => d.path),
        ['/content'],
      );
      const batch = await h.api.post(`/v1/sessions/${id}/tool-results`, {
        results: [{ tool_use_id: 'toolu_e', content, is_error: true }],
      });
      assert.equal(batch.status, 400, JSON.stringify(batch.body));
      assert.deepEqual(
        batch.body.error.details.map((d: { path: string }) => d.path),
        ['/results/0/content'],
      );
    }
    // Not an error: an empty result is one the API takes.
    const ok = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_e`, { content: '' });
    assert.equal(ok.status, 202, JSON.stringify(ok.body));
    assert.equal((await h.api.waitStatus(id, ['idle', 'failed'])).status, 'idle');
  });

  it('a history holding one is refused at create', async () => {
    const r = await h.api.post('/v1/sessions', {
      start: false,
      tools: [lookup],
      messages: [
        { role: 'user', content: 'look it up' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_h', name: 'lookup', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_h', is_error: true }] },
      ],
    });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.match(r.body.error.details[0].path, /^\/messages\/2\/content\/0/);
  });

  it("a chat's empty errorText is given a text: the model gets it and the session goes on", async () => {
    const created = await h.api.post('/v1/sessions', { start: false, tools: [lookup] });
    const id = created.body.id as string;
    h.fake.enqueue(toolCall('lookup', { q: 'x' }, { id: 'toolu_c' }), text('It failed.'));
    const chat: PlainChat = new PlainChat({
      id,
      transport: chatTransport(h.service.url, KEY),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
      onToolCall: ({ toolCall: c }) => {
        void chat.addToolOutput({
          tool: 'lookup',
          toolCallId: c.toolCallId,
          state: 'output-error',
          errorText: '',
        });
      },
    });
    const both = chat.nextFinish(2);
    await chat.sendMessage({ text: 'look it up' });
    await both;
    assert.equal(chat.error, undefined);
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const result = history
      .flatMap((m: { content: unknown }) => (Array.isArray(m.content) ? m.content : []))
      .find((b: { type: string }) => b.type === 'tool_result');
    assert.deepEqual(result, {
      type: 'tool_result',
      tool_use_id: 'toolu_c',
      content: 'error',
      is_error: true,
    });
    assert.equal(h.fake.requests.length, 2, 'the turn after the result was taken by the API');
  });
});
