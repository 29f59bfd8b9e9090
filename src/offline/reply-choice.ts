/**
 * Which reply a Messages request gets, once it is accepted: a compaction request (`compaction: {type: "summarize"}`,
 * the SDK's `compactBeforeNextTurn()`) its summary; a request whose `compact_20260112` edit triggers the summary
 * first and then (unless the edit pauses) the model's answer to what it summarizes; anything else the model's answer.
 * Shared by the offline model (fetch.ts) and the fake Messages API of the tests (test/fake/messages.ts).
 */
import {
  compactionEditOf,
  compactionReply,
  compactionSummaryOf,
  signSummary,
  summarize,
  toolChangesOf,
} from './compaction.js';
import type { FakeIterationUsage, FakeReply, FakeRequest } from './wire.js';

export type ModelAnswer = (req: FakeRequest) => FakeReply | Promise<FakeReply>;

/** `inputChars`: the JSON size of the conversation the model reads, for the edit's token trigger (4 chars a token). */
export async function chooseReply(
  fr: FakeRequest,
  inputChars: number,
  answer: ModelAnswer,
): Promise<FakeReply> {
  const body = fr.body;
  if (body.compaction) return compactionReply(fr.messages, body.compaction.instructions ?? null);
  const edit = compactionEditOf(body);
  const lastMessage = fr.messages.findLast((m) => m.role !== 'system');
  if (!edit || Math.ceil(inputChars / 4) < edit.trigger || compactionSummaryOf(lastMessage) !== undefined) {
    return answer(fr);
  }
  const summary = summarize(fr.messages, edit.instructions);
  const block = { type: 'compaction' as const, content: summary, tool_changes: toolChangesOf(fr.messages) };
  // The summarizing request is billed on its own: its tokens are in `usage.iterations`, not the top-level fields.
  const compaction: FakeIterationUsage = {
    type: 'compaction',
    input_tokens: Math.ceil(inputChars / 4),
    output_tokens: Math.max(1, Math.ceil(summary.length / 4)),
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: null,
  };
  if (edit.pauseAfter)
    return {
      type: 'message',
      content: [block],
      stop_reason: 'compaction',
      usage: { input_tokens: 0, output_tokens: 0, iterations: [compaction] },
    };
  const compacted: FakeRequest = {
    ...fr,
    messages: [
      {
        role: 'assistant',
        content: [{ ...block, signature: signSummary(summary) }],
      },
    ],
  };
  const reply = await answer(compacted);
  if (reply.type !== 'message') return reply;
  return {
    ...reply,
    content: [block, ...reply.content],
    usage: { ...reply.usage, iterations: [compaction, ...(reply.usage?.iterations ?? [])] },
  };
}
