/** The message the fake sends for a scripted reply: ids, signatures, stop reason and a token estimate filled in. */
import { signSummary } from './compaction-block.js';
import { shortId } from './respond.js';
import type { FakeMessageReply, WireBlock, WireMessage } from './wire.js';

/**
 * `model` is the request's; `inputChars` is the JSON size of the conversation the model saw; tokens are estimated at four characters each
 * (`reply.usage` overrides any of them).
 */
export function buildMessage(reply: FakeMessageReply, model: string, inputChars: number): WireMessage {
  let outputChars = 0;
  const content = reply.content.map((block): WireBlock => {
    if (block.type === 'text') {
      outputChars += block.text.length;
      return { type: 'text', text: block.text };
    }
    if (block.type === 'thinking') {
      outputChars += block.thinking.length;
      return { type: 'thinking', thinking: block.thinking, signature: `fakesig_${shortId()}` };
    }
    if (block.type === 'compaction') {
      outputChars += block.content?.length ?? 0;
      return {
        type: 'compaction',
        content: block.content,
        encrypted_content: null,
        signature: signSummary(block.content),
      };
    }
    const input = block.input === undefined ? {} : block.input;
    outputChars += JSON.stringify(input).length + block.name.length;
    return { type: 'tool_use', id: block.id ?? `toolu_${shortId()}`, name: block.name, input };
  });
  const hasToolUse = content.some((block) => block.type === 'tool_use');
  const onlyCompaction = content.length > 0 && content.every((block) => block.type === 'compaction');
  return {
    id: `msg_fake_${shortId()}`,
    type: 'message',
    role: 'assistant',
    model: reply.model ?? model,
    content,
    stop_reason: reply.stop_reason ?? (hasToolUse ? 'tool_use' : onlyCompaction ? 'compaction' : 'end_turn'),
    stop_sequence: null,
    usage: {
      input_tokens: Math.max(1, Math.ceil(inputChars / 4)),
      output_tokens: Math.max(1, Math.ceil(outputChars / 4)),
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      ...reply.usage,
    },
  };
}
