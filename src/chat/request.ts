/**
 * The body `DefaultChatTransport` posts to POST /v1/chat, and what its newest message asks of the session: a user
 * message to post, or the answers `addToolApprovalResponse` / `addToolOutput` left in the assistant message (the
 * parts' `approval` and `output`). Only the newest message is read: the session holds the history.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { badRequest, zodDetails } from '../errors.js';
import type { PostedGuard } from '../store/apply-ops.js';
import type { RequiredAction } from '../engine/status.js';
import type { SessionState } from '../store/session-state.js';
import { ID_LIKE, decisionBody, postMessageBody, toolResultsBody } from '../schemas.js';
import { isBase64 } from '../message-schemas.js';

/** Most UI messages a request may carry (the whole chat, as `useChat` sends it; only the newest is read). */
const CHAT_MAX_MESSAGES = 1000;
/** Most parts of the newest message. */
const CHAT_MAX_PARTS = 256;

const part = z.looseObject({ type: z.string().min(1).max(200) });
const uiMessage = z.looseObject({
  id: z.string().max(200),
  role: z.enum(['system', 'user', 'assistant']),
  parts: z.array(part).max(CHAT_MAX_PARTS),
});

export const chatBody = z.looseObject({
  id: z.string().regex(ID_LIKE, 'the chat id is the id of a session (POST /v1/sessions)'),
  messages: z.array(uiMessage).min(1).max(CHAT_MAX_MESSAGES),
  trigger: z.enum(['submit-message', 'regenerate-message']).optional(),
  messageId: z.string().max(200).optional(),
});
type Part = z.infer<typeof part>;
/** One UIMessage of the body. */
export type ChatMessage = z.infer<typeof chatBody>['messages'][number];

const textPart = z.looseObject({ type: z.literal('text'), text: z.string() });
const filePart = z.looseObject({ type: z.literal('file'), mediaType: z.string(), url: z.string() });
const toolPart = z.looseObject({
  type: z.string().refine((t) => t.startsWith('tool-') || t === 'dynamic-tool'),
  toolCallId: z.string().min(1).max(128),
  state: z.string(),
  input: z.unknown().optional(),
  output: z.unknown().optional(),
  errorText: z.string().optional(),
  approval: z
    .looseObject({ id: z.string(), approved: z.boolean().optional(), reason: z.string().optional() })
    .optional(),
});

/** The media types of a file part a user message may carry: images (image blocks), PDFs and plain text (documents). */
const FILE_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp', 'application/pdf', 'text/plain'];

/** A `data:` URL's parts (RFC 2397): its media type (lower case, no parameters), its parameters, its data. */
function dataUrlOf(
  url: string,
): { mediaType: string; params: string[]; base64: boolean; data: string } | null {
  const m = /^data:([^;,]*)((?:;[^;,]*)*),(.*)$/s.exec(url);
  if (!m) return null;
  const params = m[2]!
    .split(';')
    .slice(1)
    .map((p) => p.trim().toLowerCase());
  return { mediaType: m[1]!.trim().toLowerCase(), params, base64: params.includes('base64'), data: m[3]! };
}

/**
 * The media type a file part is sent as: its `mediaType` without parameters, or, when that names only the top-level
 * type (`image`, `text/*`: the ai package allows both), the type its `data:` URL names.
 */
function mediaTypeOf(part: { mediaType: string; url: string }): string {
  const own = part.mediaType.split(';')[0]!.trim().toLowerCase();
  if (own.includes('/') && !own.endsWith('/*')) return own;
  return dataUrlOf(part.url)?.mediaType || own;
}

const fileRefused = (message: string, mediaType: string) =>
  badRequest(message, { mediaType, accepted: FILE_TYPES });

/**
 * A `text/plain` file part as a document with a `text` source: its `data:` URL's bytes decoded as UTF-8 (base64 or
 * percent-encoded; no URL source takes plain text). Text that is not UTF-8, or no text at all, is refused, not sent.
 */
function textDocumentOf(url: string): unknown {
  const d = dataUrlOf(url);
  if (!d)
    throw fileRefused(
      'A text/plain file part must be a data: URL (its text is sent as a document).',
      'text/plain',
    );
  const charset = d.params.find((p) => p.startsWith('charset='))?.slice('charset='.length);
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'us-ascii')
    throw fileRefused(`A text/plain file part must be UTF-8 text, not charset ${charset}.`, 'text/plain');
  let text: string;
  try {
    if (d.base64 && !isBase64(d.data)) throw new Error('not base64');
    // fatal: bytes that are not UTF-8 throw instead of becoming U+FFFD.
    text = d.base64
      ? new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(d.data, 'base64'))
      : decodeURIComponent(d.data);
  } catch {
    throw fileRefused('A text/plain file part is not UTF-8 text in a well-formed data: URL.', 'text/plain');
  }
  if (text === '') throw fileRefused('A text/plain file part is empty.', 'text/plain');
  return { type: 'document', source: { type: 'text', media_type: 'text/plain', data: text } };
}

/**
 * The user message's parts as Messages API content blocks: text; images (data: or https: URLs) as image blocks;
 * PDFs (a base64 data: URL, or https:) and plain text (a data: URL) as document blocks. A file part of any other
 * media type is refused (400), never dropped: the model would not see what the user sent. The body's bounds
 * (BODY_LIMIT) bound a file as they bound an image; a text's decoded bytes are fewer than its URL's.
 */
export function userMessageOf(parts: Part[]): z.infer<typeof postMessageBody> {
  const blocks: unknown[] = [];
  for (const p of parts) {
    const text = textPart.safeParse(p);
    if (text.success) {
      // Blank text parts are left out (the API refuses a blank text block).
      if (/\S/.test(text.data.text)) blocks.push({ type: 'text', text: text.data.text });
      continue;
    }
    if (p.type !== 'file') continue;
    const file = filePart.safeParse(p);
    if (!file.success)
      throw badRequest('A file part needs a `mediaType` and a `url`.', zodDetails(file.error.issues));
    const mediaType = mediaTypeOf(file.data);
    if (/^image(\/|$)/.test(mediaType)) {
      const m = /^data:([^;,]+);base64,(.*)$/s.exec(file.data.url);
      blocks.push(
        m
          ? { type: 'image', source: { type: 'base64', media_type: m[1], data: m[2] } }
          : { type: 'image', source: { type: 'url', url: file.data.url } },
      );
    } else if (mediaType === 'application/pdf') {
      const d = dataUrlOf(file.data.url);
      if (d && !d.base64)
        throw fileRefused(
          "A PDF file part's data: URL must be base64 (data:application/pdf;base64,…).",
          mediaType,
        );
      // An https URL is the API's to fetch (postMessageBody refuses any other scheme).
      blocks.push({
        type: 'document',
        source: d
          ? { type: 'base64', media_type: 'application/pdf', data: d.data }
          : { type: 'url', url: file.data.url },
      });
    } else if (mediaType === 'text/plain') blocks.push(textDocumentOf(file.data.url));
    else
      throw fileRefused(
        `A file part of media type "${mediaType}" cannot be sent: images (${FILE_TYPES.slice(0, 4).join(', ')}), application/pdf and text/plain can.`,
        mediaType,
      );
  }
  if (blocks.length === 0) throw badRequest('The newest message has no text or file part to send.');
  const body = postMessageBody.safeParse({ content: blocks });
  if (!body.success)
    throw badRequest('The newest message is not a valid user turn.', zodDetails(body.error.issues));
  return body.data;
}

/** How many of a session's newest chat messages it remembers as posted (a retry of an older one posts it again). */
const POSTED_KEPT = 16;

/**
 * What the post of the newest user message records (src/store/lua/includes/recent.lua): its UIMessage id and a
 * fingerprint of the turn it posts. The same request sent again (the client lost the answer: its replica died
 * mid-stream) finds it and posts nothing; the same id with other content is an edit (`editRefused`).
 */
export function postedGuard(
  messageId: string,
  body: z.infer<typeof postMessageBody>,
  after: string,
): PostedGuard {
  const fp = createHash('sha256').update(JSON.stringify(body)).digest('base64url').slice(0, 22);
  return { id: messageId, fp, after, keep: POSTED_KEPT };
}

/** 400 for an edit of a sent user message: `sendMessage({text, messageId})`, or its id sent again with other content. */
export const editRefused = (messageId: string) =>
  badRequest(
    'Editing a sent message (messageId) is not supported: replace the history with PUT /v1/sessions/:id/messages, then load it again from GET /v1/chat/:id/messages.',
    { messageId },
  );

/**
 * What a POST /v1/chat body asks of its session (`kind`), read from its newest message (`last`): `regenerate`
 * (`trigger: "regenerate-message"`: the newest answer made again), `message` (a user message to post), or `answers`
 * (the approval responses and tool outputs an assistant message holds); and what that assistant message shows of its
 * calls, which the answer's stream reads beside the log (none for the other two).
 */
export interface ChatAsk {
  kind: 'regenerate' | 'message' | 'answers';
  /** The chat's id: its session's. */
  id: string;
  messages: ChatMessage[];
  last: ChatMessage;
  messageId: string | undefined;
  /** The outputs the client's message gives: their answer does not send them back (src/chat/chunks.ts `answered`). */
  answered: Set<string>;
  /** The inputs its parts show: a call that ran an input edited since (an approval's, by REST) shows it first. */
  inputs: Array<[string, unknown]>;
  /** The approvals its parts show asked and unanswered: a decision made elsewhere is answered in the stream. */
  asking: Set<string>;
}

/** What the body asks (`ChatAsk`); 400 for an edit of a sent user message, before the session is read. */
export function chatAskOf(body: z.infer<typeof chatBody>): ChatAsk {
  const { id, messages, trigger, messageId } = body;
  const last = messages[messages.length - 1]!;
  const kind = trigger === 'regenerate-message' ? 'regenerate' : last.role === 'user' ? 'message' : 'answers';
  // `sendMessage({text, messageId})` edits a sent user message: the client drops what followed it. The session
  // keeps its history (an append would answer a conversation the user no longer sees). The transport also sends
  // `messageId` with an assistant message (the one tool answers are in), which is no edit; nor is `regenerate`'s.
  if (kind === 'message' && messageId !== undefined) throw editRefused(messageId);
  const shows = kind === 'answers';
  return {
    kind,
    id,
    messages,
    last,
    messageId,
    answered: shows ? answeredCallIdsOf(last.parts) : new Set(),
    inputs: shows ? toolInputsOf(last.parts) : [],
    asking: shows ? approvalsAskedOf(last.parts) : new Set(),
  };
}

interface Decision {
  toolUseId: string;
  body: z.infer<typeof decisionBody>;
}

/**
 * 400 for a second answer to one call in one message: refused before anything is applied (the decisions are applied
 * one by one, so the second would otherwise be a 409 after the first had been applied).
 */
function once(seen: Set<string>, toolCallId: string): void {
  if (seen.has(toolCallId))
    throw badRequest('The newest message answers one tool call twice.', { toolCallId });
  seen.add(toolCallId);
}

/** The approval responses of the message's tool parts for the calls `action` waits a decision on. */
export function decisionsOf(parts: Part[], action: RequiredAction | null): Decision[] {
  if (action?.type !== 'approve_tool_calls') return [];
  const waiting = new Set(action.tool_calls.map((c) => c.id));
  const seen = new Set<string>();
  const out: Decision[] = [];
  for (const p of parts) {
    const t = toolPart.safeParse(p);
    const approval = t.data?.approval;
    if (!t.success || !waiting.has(t.data.toolCallId) || approval?.approved === undefined) continue;
    // The service asks each approval with its call's id as the approval's (chunks.ts, history.ts): another id answers
    // a request it never made (a stale or altered message), not this call's.
    if (approval.id !== t.data.toolCallId)
      throw badRequest('A tool approval response names an approval this call was not asked for.', {
        toolCallId: t.data.toolCallId,
      });
    once(seen, t.data.toolCallId);
    const body = decisionBody.safeParse({
      decision: approval.approved ? 'approve' : 'deny',
      ...(approval.reason !== undefined ? { reason: approval.reason } : {}),
    });
    if (!body.success)
      throw badRequest('A tool approval response is not valid.', zodDetails(body.error.issues));
    out.push({ toolUseId: t.data.toolCallId, body: body.data });
  }
  return out;
}

/**
 * The client tool calls of the step a session waits on whose result is missing, and that wait for no decision of
 * their own (`approved`: or that the request approves): their outputs are the client's to give, whatever else the
 * step waits for — an approval of another call of the step (`approve_tool_calls`) included.
 */
export function clientCallsAwaiting(
  state: SessionState,
  approved: ReadonlySet<string> = new Set(),
): Set<string> {
  const step = state.status === 'requires_action' && !state.pending?.turn ? state.pending : null;
  return new Set(
    (step?.calls ?? [])
      .filter(
        (c) =>
          c.kind === 'client' &&
          !c.result &&
          (c.approval === 'auto' || c.approval === 'approved' || approved.has(c.id)),
      )
      .map((c) => c.id),
  );
}

/** The client tool outputs of the message's tool parts for the calls of `waiting` (clientCallsAwaiting). */
export function resultsOf(
  parts: Part[],
  waiting: ReadonlySet<string>,
): z.infer<typeof toolResultsBody>['results'] {
  if (waiting.size === 0) return [];
  const seen = new Set<string>();
  const results: unknown[] = [];
  for (const p of parts) {
    const t = toolPart.safeParse(p);
    if (!t.success || !waiting.has(t.data.toolCallId)) continue;
    if (t.data.state === 'output-available' || t.data.state === 'output-error') once(seen, t.data.toolCallId);
    if (t.data.state === 'output-available')
      results.push({
        tool_use_id: t.data.toolCallId,
        content: typeof t.data.output === 'string' ? t.data.output : JSON.stringify(t.data.output ?? null),
      });
    else if (t.data.state === 'output-error')
      results.push({ tool_use_id: t.data.toolCallId, content: t.data.errorText || 'error', is_error: true });
  }
  if (results.length === 0) return [];
  const body = toolResultsBody.safeParse({ results, continue: true });
  if (!body.success)
    throw badRequest('A tool output is not a valid tool result.', zodDetails(body.error.issues));
  return body.data.results;
}

/** The tool call ids of a message's parts (the calls a stream may refer to). */
export function toolCallIdsOf(parts: Part[]): string[] {
  return parts.flatMap((p) => {
    const t = toolPart.safeParse(p);
    return t.success ? [t.data.toolCallId] : [];
  });
}

/** The inputs a message's tool parts show, by call id (a part without one shows none). */
function toolInputsOf(parts: Part[]): Array<[string, unknown]> {
  return parts.flatMap((p): Array<[string, unknown]> => {
    const t = toolPart.safeParse(p);
    return t.success && t.data.input !== undefined ? [[t.data.toolCallId, t.data.input]] : [];
  });
}

/**
 * The tool call ids of a message's parts whose approval is asked and not answered (`approval-requested`, its
 * `approval` without `approved`): a decision made elsewhere on one of them is the answer's to show (src/chat/chunks.ts
 * `asked`).
 */
export function approvalsAskedOf(parts: Part[]): Set<string> {
  const out = new Set<string>();
  for (const p of parts) {
    const t = toolPart.safeParse(p);
    if (t.success && t.data.state === 'approval-requested' && t.data.approval?.approved === undefined)
      out.add(t.data.toolCallId);
  }
  return out;
}

/** The tool call ids of a message's parts that show the call's outcome (an output, an error, a denial). */
export function answeredCallIdsOf(parts: Part[]): Set<string> {
  const out = new Set<string>();
  for (const p of parts) {
    const t = toolPart.safeParse(p);
    if (t.success && t.data.state.startsWith('output-')) out.add(t.data.toolCallId);
  }
  return out;
}
