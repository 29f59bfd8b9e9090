/** The compaction fields of a request body, checked as the Messages API checks them (the fake's validation). */
import { compactionSummaryOf } from '../../src/offline/compaction-block.js';
import { invalid, unchecked } from './validate.js';
import { COMPACTION_BETA, CONTEXT_COMPACTION_BETA } from '../../src/offline/wire.js';

/** The betas of a request's `anthropic-beta` header. */
export function betasOf(headers: Record<string, string | string[] | undefined>): string[] {
  const raw = headers['anthropic-beta'];
  const joined = Array.isArray(raw) ? raw.join(',') : (raw ?? '');
  return joined.split(',').map((beta) => beta.trim());
}

/**
 * Checks the compaction fields of a body as the API does: `compaction` needs its beta and a `summarize` config, and
 * comes alone (no `context_management`, no reply-shaping params); a compaction edit needs its beta; a conversation
 * that sends a compaction block back needs one of the two.
 */
export function validateCompactionFields(
  raw: unknown,
  headers: Record<string, string | string[] | undefined>,
): void {
  const body = unchecked<
    'compaction' | 'context_management' | 'stop_sequences' | 'tool_choice' | 'messages' | 'output_format'
  >(raw);
  if (!body) return;
  const betas = betasOf(headers);
  const compaction = body.compaction;
  if (compaction !== undefined && compaction !== null) {
    const config = unchecked<'type' | 'instructions'>(compaction);
    if (!config || config.type !== 'summarize') throw invalid("compaction.type: Input should be 'summarize'");
    if (
      config.instructions !== undefined &&
      config.instructions !== null &&
      typeof config.instructions !== 'string'
    ) {
      throw invalid('compaction.instructions: Input should be a valid string');
    }
    if (!betas.includes(COMPACTION_BETA)) {
      throw invalid(`compaction: requires the \`anthropic-beta: ${COMPACTION_BETA}\` header`);
    }
    if (body.context_management !== undefined && body.context_management !== null) {
      throw invalid('compaction: cannot be combined with `context_management`');
    }
    if (body.stop_sequences !== undefined || body.output_format !== undefined) {
      throw invalid(
        'compaction: a compaction request returns no reply, so reply params such as `stop_sequences` are not accepted',
      );
    }
    const choice = unchecked<'type'>(body.tool_choice)?.type;
    if (choice === 'any' || choice === 'tool') {
      throw invalid(`compaction: \`tool_choice: ${choice}\` is not accepted on a compaction request`);
    }
    const messages = Array.isArray(body.messages) ? body.messages : [];
    const last = messages.findLast((m) => unchecked<'role'>(m)?.role !== 'system');
    const lastMessage = unchecked<'role' | 'content'>(last);
    if (
      lastMessage?.role === 'assistant' &&
      Array.isArray(lastMessage.content) &&
      lastMessage.content.some((b) => unchecked<'type'>(b)?.type === 'tool_use')
    ) {
      throw invalid(
        'compaction: the conversation ends with tool calls that have no results; a conversation is compacted between turns',
      );
    }
  }
  const edits = unchecked<'edits'>(body.context_management)?.edits;
  if (
    Array.isArray(edits) &&
    edits.some((e) => String(unchecked<'type'>(e)?.type ?? '').startsWith('compact_'))
  ) {
    if (!betas.includes(CONTEXT_COMPACTION_BETA)) {
      throw invalid(
        `context_management: a compaction edit requires the \`anthropic-beta: ${CONTEXT_COMPACTION_BETA}\` header`,
      );
    }
  }
  const messages = Array.isArray(body.messages) ? body.messages : [];
  if (
    messages.some((m) => compactionSummaryOf(m) !== undefined) &&
    !betas.includes(COMPACTION_BETA) &&
    !betas.includes(CONTEXT_COMPACTION_BETA)
  ) {
    throw invalid(
      `messages: a \`compaction\` block requires the \`anthropic-beta: ${COMPACTION_BETA}\` (or ${CONTEXT_COMPACTION_BETA}) header`,
    );
  }
}
