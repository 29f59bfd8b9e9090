/** A message as the API streams it over SSE: `message_start`, each block's start, deltas and stop, `message_delta`, `message_stop`. */
import { textChunks } from './scan.js';
import type { WireMessage } from './wire.js';

function sse(type: string, data: unknown): string {
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** The SSE events of `message`, each a complete `event: …\ndata: …\n\n` string, ending with `message_stop`. */
export function sseEvents(message: WireMessage): string[] {
  const events: string[] = [];
  events.push(
    sse('message_start', {
      type: 'message_start',
      message: {
        ...message,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...message.usage, output_tokens: 1, iterations: undefined },
      },
    }),
  );
  events.push(sse('ping', { type: 'ping' }));
  message.content.forEach((block, index) => {
    const delta = (d: unknown) =>
      events.push(sse('content_block_delta', { type: 'content_block_delta', index, delta: d }));
    if (block.type === 'text') {
      events.push(
        sse('content_block_start', {
          type: 'content_block_start',
          index,
          content_block: { type: 'text', text: '' },
        }),
      );
      for (const chunk of textChunks(block.text)) delta({ type: 'text_delta', text: chunk });
    } else if (block.type === 'thinking') {
      events.push(
        sse('content_block_start', {
          type: 'content_block_start',
          index,
          content_block: { type: 'thinking', thinking: '', signature: '' },
        }),
      );
      for (const chunk of textChunks(block.thinking)) delta({ type: 'thinking_delta', thinking: chunk });
      delta({ type: 'signature_delta', signature: block.signature });
    } else if (block.type === 'compaction') {
      // As the API streams it: the block opens empty (with its signature), one delta carries the whole summary.
      events.push(
        sse('content_block_start', {
          type: 'content_block_start',
          index,
          content_block: {
            type: 'compaction',
            content: null,
            encrypted_content: null,
            signature: block.signature,
            ...(block.tool_changes ? { tool_changes: block.tool_changes } : {}),
          },
        }),
      );
      delta({ type: 'compaction_delta', content: block.content, encrypted_content: block.encrypted_content });
    } else if (block.type !== 'tool_use' && block.type !== 'server_tool_use') {
      // A server tool's result arrives whole in its `content_block_start`, as from the API.
      events.push(sse('content_block_start', { type: 'content_block_start', index, content_block: block }));
    } else {
      events.push(
        sse('content_block_start', {
          type: 'content_block_start',
          index,
          content_block: { type: block.type, id: block.id, name: block.name, input: {} },
        }),
      );
      for (const chunk of jsonChunks(JSON.stringify(block.input)))
        delta({ type: 'input_json_delta', partial_json: chunk });
    }
    events.push(sse('content_block_stop', { type: 'content_block_stop', index }));
  });
  events.push(
    sse('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: message.stop_reason, stop_sequence: null },
      usage: {
        input_tokens: message.usage.input_tokens,
        cache_creation_input_tokens: message.usage.cache_creation_input_tokens,
        cache_read_input_tokens: message.usage.cache_read_input_tokens,
        output_tokens: message.usage.output_tokens,
        ...(message.usage.server_tool_use ? { server_tool_use: message.usage.server_tool_use } : {}),
        ...(message.usage.iterations ? { iterations: message.usage.iterations } : {}),
      },
    }),
  );
  events.push(sse('message_stop', { type: 'message_stop' }));
  return events;
}

/** JSON split into at least two chunks (of at most ~24 characters) when it has two characters or more. */
export function jsonChunks(json: string): string[] {
  if (json.length < 2) return [json];
  const count = Math.max(2, Math.ceil(json.length / 24));
  const size = Math.ceil(json.length / count);
  const chunks: string[] = [];
  for (let i = 0; i < json.length; i += size) chunks.push(json.slice(i, i + size));
  return chunks;
}
