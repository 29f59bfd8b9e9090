/**
 * The request-side Messages API shapes: the content blocks a client may put in a session's history, the messages
 * built from them, and the content of follow-ups and tool results. The session bodies (src/schemas.ts) are built on
 * these; the stored history is checked against them when a client sends it.
 */
import { z } from 'zod';
import { serverBlock, serverToolResultBlock } from './tools/server-blocks.js';

/* Strict objects, so a typo in a block is a 400 before anything is persisted rather than a 400 from the upstream
 * several turns later. */

const cacheControl = z.strictObject({ type: z.literal('ephemeral'), ttl: z.enum(['5m', '1h']).optional() });
const withCache = { cache_control: cacheControl.nullish() };

/*
 * What the API refuses inside a block is refused here too (400 `invalid_request`), as refinements: the OpenAPI
 * document (openapi.json, generated from these schemas) keeps its shapes.
 */

/** The API refuses an empty text block anywhere (messages, tool results, `system`). */
const blockText = z
  .string()
  .refine((t) => t.length > 0, { message: 'text content blocks must be non-empty' });

/**
 * The API refuses a message's text that is only whitespace ("text content blocks must contain non-whitespace
 * text"): refused when posted rather than failing the run, and every later one with it (a follow-up joins the same
 * trailing user turn). One `\S` test, no backtracking. (A reply's blank blocks are dropped when stored.)
 */
const NOT_BLANK = { message: 'text content blocks must contain non-whitespace text' };
const hasText = (t: string) => /\S/.test(t);
export const userText = z.string().min(1).refine(hasText, NOT_BLANK);

/** Standard base64 (RFC 4648 §4) with its padding, as the API decodes an image's or a PDF's `data`. */
export function isBase64(data: string): boolean {
  return data.length > 0 && data.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(data);
}
const NOT_BASE64 = 'not valid base64 (A-Z, a-z, 0-9, + and /, padded with = to a multiple of 4 characters)';
/** The API fetches `url` sources over https only. */
const httpsUrl = z.url({ protocol: /^https$/, error: 'an https URL (a data: URL goes in a base64 source)' });

/*
 * A text block's citations, as the API returns and takes them: one of its five locations with the fields the API
 * requires of it (other fields a reply carries, `file_id` say, pass through).
 */
const index = z.number().int().nonnegative();
const cited = { cited_text: z.string(), document_title: z.string().nullish() };
const citation = z.discriminatedUnion('type', [
  z.looseObject({
    type: z.literal('char_location'),
    ...cited,
    document_index: index,
    start_char_index: index,
    end_char_index: index,
  }),
  z.looseObject({
    type: z.literal('page_location'),
    ...cited,
    document_index: index,
    start_page_number: index,
    end_page_number: index,
  }),
  z.looseObject({
    type: z.literal('content_block_location'),
    ...cited,
    document_index: index,
    start_block_index: index,
    end_block_index: index,
  }),
  z.looseObject({
    type: z.literal('web_search_result_location'),
    cited_text: z.string(),
    url: z.string().min(1),
    encrypted_index: z.string(),
  }),
  z.looseObject({
    type: z.literal('search_result_location'),
    cited_text: z.string(),
    search_result_index: index,
    start_block_index: index,
    end_block_index: index,
    source: z.string(),
  }),
]);

export const textBlock = z.strictObject({
  type: z.literal('text'),
  text: blockText,
  citations: z.array(citation).nullish(),
  ...withCache,
});
/** A text block of a message (user or assistant): not blank either. */
const nonBlankTextBlock = textBlock.extend({ text: blockText.refine(hasText, NOT_BLANK) });
const imageSource = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('base64'),
    media_type: z.enum(['image/jpeg', 'image/png', 'image/gif', 'image/webp']),
    data: z.string().min(1).refine(isBase64, { message: NOT_BASE64 }),
  }),
  z.strictObject({ type: z.literal('url'), url: httpsUrl }),
  z.strictObject({ type: z.literal('file'), file_id: z.string().min(1) }),
]);
const imageBlock = z.strictObject({ type: z.literal('image'), source: imageSource, ...withCache });
/**
 * A document's source, with the fields the API requires of each kind: a PDF as base64 `data`, plain text, an https
 * `url`, content blocks (text and images), or an uploaded file.
 */
const documentSource = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('base64'),
    media_type: z.literal('application/pdf', {
      error: 'a base64 document is a PDF: media_type "application/pdf"',
    }),
    data: z.string().refine(isBase64, { message: NOT_BASE64 }),
  }),
  z.strictObject({ type: z.literal('text'), media_type: z.literal('text/plain'), data: z.string() }),
  z.strictObject({ type: z.literal('url'), url: httpsUrl }),
  z.strictObject({
    type: z.literal('content'),
    content: z.union([z.string(), z.array(z.discriminatedUnion('type', [textBlock, imageBlock])).min(1)]),
  }),
  z.strictObject({ type: z.literal('file'), file_id: z.string().min(1) }),
]);
const documentBlock = z.strictObject({
  type: z.literal('document'),
  source: documentSource,
  title: z.string().nullish(),
  context: z.string().nullish(),
  citations: z.looseObject({}).nullish(),
  ...withCache,
});
const searchResultBlock = z.strictObject({
  type: z.literal('search_result'),
  source: z.string(),
  title: z.string(),
  content: z.array(textBlock),
  citations: z.looseObject({}).nullish(),
  ...withCache,
});
export const toolResultContent = z.union([
  z.string(),
  z.array(z.discriminatedUnion('type', [textBlock, imageBlock, documentBlock, searchResultBlock])),
]);
/** Who made a call (`{"type": "direct"}`, or a server tool such as code execution calling a tool). */
const caller = z.looseObject({ type: z.string().min(1) });
const toolUseBlock = z.strictObject({
  type: z.literal('tool_use'),
  id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/),
  name: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/),
  input: z.record(z.string(), z.unknown()),
  caller: caller.nullish(),
  /** The toolset a call of a toolset's tool belongs to. */
  toolset_name: z.string().nullish(),
  ...withCache,
});
/**
 * The Messages API refuses an `is_error` result without content ("content cannot be empty if `is_error` is true"):
 * a client's result, or a history, holding one is refused here (a tool's own empty error is given a text instead:
 * src/store/pending.ts `setResult`).
 */
export const errorResultHasContent: [
  check: (r: {
    content?: string | readonly unknown[] | undefined;
    is_error?: boolean | undefined;
  }) => boolean,
  params: { message: string; path: PropertyKey[] },
] = [
  (r) => !(r.is_error === true && (r.content === undefined || r.content.length === 0)),
  {
    message: 'content cannot be empty when is_error is true (the Messages API refuses it)',
    path: ['content'],
  },
];
const toolResultBlock = z
  .strictObject({
    type: z.literal('tool_result'),
    tool_use_id: z.string().min(1),
    content: toolResultContent.optional(),
    is_error: z.boolean().optional(),
    ...withCache,
  })
  .refine(...errorResultHasContent);
const thinkingBlock = z.strictObject({
  type: z.literal('thinking'),
  thinking: z.string(),
  signature: z.string(),
});
const redactedThinkingBlock = z.strictObject({ type: z.literal('redacted_thinking'), data: z.string() });

/** A file uploaded into the code-execution container. */
const containerUploadBlock = z.strictObject({
  type: z.literal('container_upload'),
  file_id: z.string().min(1),
  ...withCache,
});
/** A tool change told to the model (`tool_addition` / `tool_removal`, beta `inline-tools-2026-09-15`). */
const toolChangeBlock = z.strictObject({
  type: z.enum(['tool_addition', 'tool_removal']),
  tool: z.looseObject({
    type: z.enum(['tool_definition', 'tool_reference', 'mcp_tool_reference', 'mcp_toolset_reference']),
  }),
  ...withCache,
});
/**
 * A compaction's summary (`null`: a compaction that produced none), sent back as it was returned — with the tool
 * changes of the range it compacted when the API computed them (`tool_changes`, "send the block back unchanged").
 */
const compactionBlock = z.strictObject({
  type: z.literal('compaction'),
  content: z.string().nullable(),
  encrypted_content: z.string().nullish(),
  signature: z.string().nullish(),
  tool_changes: z.array(toolChangeBlock).nullish(),
  ...withCache,
});

/*
 * The blocks of Anthropic's MCP connector (`mcp_servers`) in a reply: a call the API made to a server and its
 * result, paired in one assistant turn as server tools are (src/tools/server-blocks.ts), and the listing of a
 * server's tools. Sent back as they came.
 */
const mcpToolUseBlock = z.looseObject({
  type: z.literal('mcp_tool_use'),
  id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/),
  name: z.string().min(1),
  server_name: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
  ...withCache,
});
const mcpToolResultBlock = z.strictObject({
  type: z.literal('mcp_tool_result'),
  tool_use_id: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/),
  content: z.union([z.string(), z.array(textBlock)]).optional(),
  is_error: z.boolean().optional(),
  ...withCache,
});
const mcpToolListingBlock = z.looseObject({
  type: z.literal('mcp_tool_listing'),
  mcp_server_name: z.string().min(1),
  tools: z.array(z.looseObject({})),
});
/** A reply that moved to another model (`from`, `to`), sent back as it came. */
const fallbackBlock = z.looseObject({
  type: z.literal('fallback'),
  from: z.looseObject({}),
  to: z.looseObject({}),
});

const userBlock = z.discriminatedUnion('type', [
  nonBlankTextBlock,
  imageBlock,
  documentBlock,
  searchResultBlock,
  toolResultBlock,
  containerUploadBlock,
]);
const assistantBlock = z.discriminatedUnion('type', [
  nonBlankTextBlock,
  toolUseBlock,
  thinkingBlock,
  redactedThinkingBlock,
  serverBlock,
  serverToolResultBlock,
  compactionBlock,
  mcpToolUseBlock,
  mcpToolResultBlock,
  mcpToolListingBlock,
  fallbackBlock,
]);

const userMessage = z.strictObject({
  role: z.literal('user'),
  content: z.union([userText, z.array(userBlock).min(1)]),
});
const assistantMessage = z.strictObject({
  role: z.literal('assistant'),
  // `[]`: a reply that said nothing, as `GET …/messages` answers it; never sent but at the end (src/history.ts).
  content: z.union([z.string().min(1), z.array(assistantBlock)]),
});
/** A tool change the runner sent (src/engine/tools-change.ts): `GET …/messages` answers it, create takes it back. */
const systemMessage = z.strictObject({
  role: z.literal('system'),
  content: z.array(toolChangeBlock).min(1),
});
export const messageParam = z.discriminatedUnion('role', [userMessage, assistantMessage, systemMessage]);

/** Content a client adds as a user turn (follow-ups): no tool results, those go through the tool-result routes. */
export const userContent = z.union([
  userText,
  z
    .array(z.discriminatedUnion('type', [nonBlankTextBlock, imageBlock, documentBlock, searchResultBlock]))
    .min(1),
]);
