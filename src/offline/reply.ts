/** The message the fake sends for a scripted reply: ids, signatures, stop reason and a token estimate filled in. */
import { signSummary } from './compaction-block.js';
import { shortId } from './envelope.js';
import type { FakeMessageReply, WireBlock, WireMessage } from './wire.js';

/**
 * `model` is the request's; `inputChars` is the JSON size of the conversation the model saw; tokens are estimated at four characters each
 * (`reply.usage` overrides any of them).
 */
export function buildMessage(
  reply: FakeMessageReply,
  model: string,
  inputChars: number,
  /** The request's `container` (an id, or `{id}`): the reply runs in it. */
  requestContainer?: unknown,
): WireMessage {
  let outputChars = 0;
  /** The id of the last `server_tool_use` so far: what a result block without `tool_use_id` answers. */
  let lastServerUse = '';
  const serverRequests = { web_search_requests: 0, web_fetch_requests: 0 };
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
        ...(block.tool_changes ? { tool_changes: block.tool_changes } : {}),
      };
    }
    if (block.type === 'tool_use' || block.type === 'server_tool_use') {
      const input = block.input === undefined ? {} : block.input;
      outputChars += JSON.stringify(input).length + block.name.length;
      if (block.type === 'tool_use')
        return { type: 'tool_use', id: block.id ?? `toolu_${shortId()}`, name: block.name, input };
      lastServerUse = block.id ?? `srvtoolu_${shortId()}`;
      if (block.name === 'web_search') serverRequests.web_search_requests++;
      if (block.name === 'web_fetch') serverRequests.web_fetch_requests++;
      return { type: 'server_tool_use', id: lastServerUse, name: block.name, input };
    }
    // A server tool's result: the API's own output, not counted as the model's.
    return { ...block, tool_use_id: block.tool_use_id ?? lastServerUse };
  });
  const hasToolUse = content.some((block) => block.type === 'tool_use');
  const onlyCompaction = content.length > 0 && content.every((block) => block.type === 'compaction');
  const usedServerTools = content.some((block) => block.type === 'server_tool_use');
  return {
    id: `msg_fake_${shortId()}`,
    type: 'message',
    role: 'assistant',
    model: reply.model ?? model,
    content,
    stop_reason: reply.stop_reason ?? (hasToolUse ? 'tool_use' : onlyCompaction ? 'compaction' : 'end_turn'),
    stop_sequence: null,
    container: containerOf(reply.container?.id ?? requestContainer),
    usage: {
      input_tokens: Math.max(1, Math.ceil(inputChars / 4)),
      output_tokens: Math.max(1, Math.ceil(outputChars / 4)),
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      ...(usedServerTools ? { server_tool_use: serverRequests } : {}),
      ...reply.usage,
      cache_creation: reply.usage?.cache_creation ?? {
        ephemeral_5m_input_tokens: reply.usage?.cache_creation_input_tokens ?? 0,
        ephemeral_1h_input_tokens: 0,
      },
    },
  };
}

/** A reply's `container` from a request's (`"id"` or `{id}`), or null when it names none. */
function containerOf(container: unknown): WireMessage['container'] {
  const id =
    typeof container === 'string'
      ? container
      : typeof container === 'object' && container !== null && 'id' in container
        ? container.id
        : undefined;
  if (typeof id !== 'string' || !id) return null;
  return { id, expires_at: new Date(Date.now() + 3_600_000).toISOString(), skills: null };
}
