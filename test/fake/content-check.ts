/**
 * What the Messages API checks inside content blocks and in `tool_choice` (the fake's validation): text blocks are
 * non-empty (in messages, nested tool results and `system`), an `is_error` tool result has content, a message's text block is not only whitespace (nor a user
 * turn's string), an image or a PDF given as base64 carries a media type
 * the API takes and well-formed base64, one given by URL an https URL; `tool_choice` has its exact shape, `any` and
 * `tool` need tools, and `tool` names one of the tools available to the model.
 */
import { invalid, unchecked } from './validate.js';

const IMAGE_MEDIA_TYPES: ReadonlySet<string> = new Set([
  'image/jpeg',
  'image/png',
  'image/gif',
  'image/webp',
]);

/** Standard base64 (RFC 4648 §4) with its padding: what the API decodes. */
function isBase64(data: string): boolean {
  return data.length > 0 && data.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(data);
}

function isHttpsUrl(url: unknown): boolean {
  if (typeof url !== 'string') return false;
  try {
    return new URL(url).protocol === 'https:';
  } catch {
    return false;
  }
}

/** An image or document `source`, as the API checks it (`kind`: `image` or `document`). */
function checkSource(raw: unknown, kind: 'image' | 'document', at: string): void {
  const source = unchecked<'type' | 'media_type' | 'data' | 'url'>(raw);
  if (!source) throw invalid(`${at}.${kind}.source: Field required`);
  if (source.type === 'base64') {
    if (
      kind === 'image' &&
      (typeof source.media_type !== 'string' || !IMAGE_MEDIA_TYPES.has(source.media_type))
    )
      throw invalid(
        `${at}.${kind}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'`,
      );
    if (kind === 'document' && source.media_type !== 'application/pdf')
      throw invalid(`${at}.${kind}.source.base64.media_type: Input should be 'application/pdf'`);
    if (typeof source.data !== 'string' || !isBase64(source.data))
      throw invalid(`${at}.${kind}.source.base64.data: The ${kind} data is not valid base64`);
  } else if (source.type === 'url') {
    if (!isHttpsUrl(source.url)) throw invalid(`${at}.${kind}.source.url.url: Only https URLs are supported`);
  } else if (kind === 'document') checkDocumentSource(raw, at);
}

/** A document's other sources: plain text, content blocks, an uploaded file; nothing else. */
function checkDocumentSource(raw: unknown, at: string): void {
  const source = unchecked<'type' | 'media_type' | 'data' | 'content' | 'file_id'>(raw)!;
  if (source.type === 'text') {
    if (source.media_type !== 'text/plain')
      throw invalid(`${at}.document.source.text.media_type: Input should be 'text/plain'`);
    if (typeof source.data !== 'string') throw invalid(`${at}.document.source.text.data: Field required`);
  } else if (source.type === 'content') {
    const ok =
      typeof source.content === 'string' || (Array.isArray(source.content) && source.content.length > 0);
    if (!ok)
      throw invalid(`${at}.document.source.content.content: Input should be a string or a list of blocks`);
  } else if (source.type === 'file') {
    if (typeof source.file_id !== 'string' || !source.file_id)
      throw invalid(`${at}.document.source.file.file_id: Field required`);
  } else if (source.type !== 'base64' && source.type !== 'url') {
    throw invalid(`${at}.document.source: Input tag '${String(source.type)}' is not one of the source types`);
  }
}

/** The citation locations of a text block. */
const CITATION_TYPES = new Set([
  'char_location',
  'page_location',
  'content_block_location',
  'web_search_result_location',
  'search_result_location',
]);

function checkCitations(raw: unknown, at: string): void {
  if (raw === undefined || raw === null) return;
  if (!Array.isArray(raw)) throw invalid(`${at}.text.citations: Input should be a valid list`);
  raw.forEach((c: unknown, i: number) => {
    const citation = unchecked<'type' | 'cited_text'>(c);
    if (!citation || typeof citation.type !== 'string' || !CITATION_TYPES.has(citation.type))
      throw invalid(
        `${at}.text.citations.${i}: Input tag '${String(citation?.type)}' is not a citation type`,
      );
    if (typeof citation.cited_text !== 'string')
      throw invalid(`${at}.text.citations.${i}.cited_text: Field required`);
  });
}

/** One content block of a message (or of a tool result, or a search result), and the blocks nested in it. */
function checkBlock(raw: unknown, at: string): void {
  const block = unchecked<'type' | 'text' | 'source' | 'content' | 'citations' | 'is_error'>(raw);
  if (!block) return;
  if (block.type === 'tool_result' && block.is_error === true && emptyContent(block.content))
    throw invalid(`${at}: content cannot be empty if \`is_error\` is true`);
  if (block.type === 'text' && block.text === '')
    throw invalid('messages: text content blocks must be non-empty');
  if (block.type === 'text') checkCitations(block.citations, at);
  if (block.type === 'image' || block.type === 'document') checkSource(block.source, block.type, at);
  if ((block.type === 'tool_result' || block.type === 'search_result') && Array.isArray(block.content))
    block.content.forEach((b: unknown, k: number) => checkBlock(b, `${at}.content.${k}`));
}

/** A tool result's content that says nothing: absent, `""` or `[]`. */
const emptyContent = (content: unknown) =>
  content === undefined || content === '' || (Array.isArray(content) && content.length === 0);

const BLANK = 'messages: text content blocks must contain non-whitespace text';
const blank = (text: unknown) => typeof text === 'string' && text !== '' && !/\S/.test(text);

/** The content blocks of a conversation's user and assistant messages; a text block is never blank. */
export function validateContentBlocks(conversation: readonly unknown[]): void {
  conversation.forEach((raw, i) => {
    const message = unchecked<'role' | 'content'>(raw);
    if (!message || message.role === 'system') return;
    if (message.role === 'user' && blank(message.content)) throw invalid(BLANK);
    if (!Array.isArray(message.content)) return;
    message.content.forEach((b: unknown, j: number) => {
      if (unchecked<'type' | 'text'>(b)?.type === 'text' && blank(unchecked<'text'>(b)?.text))
        throw invalid(BLANK);
      checkBlock(b, `messages.${i}.content.${j}`);
    });
  });
}

/** `system`: a string, or text blocks none of which is empty. */
export function validateSystem(raw: unknown): void {
  if (raw === undefined || raw === null || typeof raw === 'string') return;
  if (!Array.isArray(raw)) throw invalid('system: Input should be a valid string or list of text blocks');
  raw.forEach((b: unknown, i: number) => {
    const block = unchecked<'type' | 'text'>(b);
    if (block?.type !== 'text') throw invalid(`system.${i}.type: Input should be 'text'`);
    if (typeof block.text !== 'string') throw invalid(`system.${i}.text: Field required`);
    if (block.text === '') throw invalid('system: text content blocks must be non-empty');
  });
}

/** The fields each `tool_choice` type takes. */
const TOOL_CHOICE_KEYS: Readonly<Record<string, readonly string[]>> = {
  auto: ['type', 'disable_parallel_tool_use'],
  any: ['type', 'disable_parallel_tool_use'],
  tool: ['type', 'name', 'disable_parallel_tool_use'],
  none: ['type'],
};

/**
 * `tool_choice` against the tools available to the model at the end of the conversation (`available`: declared in
 * `tools`, then changed by `tool_addition` / `tool_removal`). `opaque`: a tool whose names the request does not
 * spell out (an `mcp_toolset`), so a name may be one of its tools.
 */
export function validateToolChoice(raw: unknown, available: ReadonlySet<string>, opaque: boolean): void {
  if (raw === undefined || raw === null) return;
  const choice = unchecked<'type' | 'name' | 'disable_parallel_tool_use'>(raw);
  if (!choice) throw invalid('tool_choice: Input should be a valid dictionary');
  const keys = typeof choice.type === 'string' ? TOOL_CHOICE_KEYS[choice.type] : undefined;
  if (!keys)
    throw invalid(
      `tool_choice: Input tag '${String(choice.type)}' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'`,
    );
  const type = String(choice.type);
  for (const key of Object.keys(choice)) {
    if (!keys.includes(key)) throw invalid(`tool_choice.${type}.${key}: Extra inputs are not permitted`);
  }
  if (choice.disable_parallel_tool_use !== undefined && typeof choice.disable_parallel_tool_use !== 'boolean')
    throw invalid(`tool_choice.${type}.disable_parallel_tool_use: Input should be a valid boolean`);
  if (type === 'tool' && choice.name === undefined) throw invalid('tool_choice.tool.name: Field required');
  if (type === 'tool' && typeof choice.name !== 'string')
    throw invalid('tool_choice.tool.name: Input should be a valid string');
  if (type !== 'any' && type !== 'tool') return;
  if (available.size === 0 && !opaque)
    throw invalid(`tool_choice: \`tool_choice.type: ${type}\` may only be specified while providing tools`);
  if (type === 'tool' && !available.has(String(choice.name)) && !opaque)
    throw invalid(`tool_choice.tool.name: Tool '${String(choice.name)}' not found in tools`);
}
