/**
 * A denied call in a UI message stream ends as the `ai` package's schema wants an `output-denied` part: its
 * `approval` answered (`approved: false`, the reason), whether the stream replays the log (a denial made by REST or
 * another tab after this stream asked for the approval) or the history's kept steps (a resume after a retry).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readUIMessageStream, validateUIMessages, type UIMessage, type UIMessageChunk } from 'ai';
import { ChatTranslator, type UIChunk } from '../../src/chat/chunks.js';
import { keptSteps } from '../../src/chat/history.js';
import type { StoredMessage } from '../../src/history.js';

/** The message `readUIMessageStream` builds of `chunks`, validated as a reloaded Chat's messages are. */
async function messageOf(chunks: UIChunk[]): Promise<UIMessage> {
  const stream = new ReadableStream<UIMessageChunk>({
    start(c) {
      for (const chunk of chunks) c.enqueue(chunk as UIMessageChunk);
      c.close();
    },
  });
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream })) last = m;
  assert.ok(last);
  const [valid] = await validateUIMessages<UIMessage>({ messages: [last] });
  return valid!;
}

const call = { id: 'toolu_w', name: 'get_weather', input: { location: 'Paris' } };
const toolPart = (m: UIMessage) =>
  m.parts.find((p) => p.type === 'tool-get_weather') as Record<string, unknown>;

/**
 * A replay of the whole message (the pause before the current run, at 5-0, does not end it) that asks for the
 * call's approval, then `then`'s chunks; the step and the message closed.
 */
function askedThen(then: (t: ChatTranslator) => UIChunk[]): UIChunk[] {
  const t = new ChatTranslator('ses_x-1', [], { pausedBefore: '5-0' });
  return [
    ...t.start(),
    { type: 'start-step' },
    ...t.event(
      'session.status',
      { status: 'requires_action', required_action: { type: 'approve_tool_calls', tool_calls: [call] } },
      '1-0',
    ),
    ...then(t),
    { type: 'finish-step' },
    { type: 'finish' },
  ];
}

describe('denied calls in a UI message stream', () => {
  it('a denial in the log after this stream asked for the approval: the approval answered, then denied', async () => {
    const part = toolPart(
      await messageOf(
        askedThen((t) =>
          t.event('tool_call.decided', { tool_use_id: call.id, decision: 'deny', reason: 'not now' }, '2-0'),
        ),
      ),
    );
    assert.equal(part['state'], 'output-denied');
    assert.deepEqual(part['approval'], { id: call.id, approved: false, reason: 'not now' });
  });

  it("the kept steps of a resume after a retry: the denied call's part as GET …/messages gives it", async () => {
    const history: StoredMessage[] = [
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
      { role: 'assistant', content: [{ type: 'tool_use', ...call }] },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: call.id, content: 'Tool call denied: not now', is_error: true },
        ],
      },
    ];
    const kept = keptSteps('ses_x', history, 0, 3, 'ses_x-1', new Set(), new Map([[call.id, 'not now']]));
    assert.ok(kept.length > 0);
    const part = toolPart(
      await messageOf([{ type: 'start', messageId: 'ses_x-1' }, ...kept, { type: 'finish' }]),
    );
    assert.equal(part['state'], 'output-denied');
    assert.deepEqual(part['approval'], { id: call.id, approved: false, reason: 'not now' });
  });

  it('an approval in the log after this stream asked for it: the approval answered, then the output', async () => {
    const part = toolPart(
      await messageOf(
        askedThen((t) => [
          ...t.event('tool_call.decided', { tool_use_id: call.id, decision: 'approve' }, '2-0'),
          ...t.event(
            'tool.completed',
            { tool_use_id: call.id, name: call.name, input: call.input, content: 'Sunny', is_error: false },
            '6-0',
          ),
        ]),
      ),
    );
    assert.equal(part['state'], 'output-available');
    assert.deepEqual(part['approval'], { id: call.id, approved: true });
  });
});
