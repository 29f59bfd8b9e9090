/**
 * The offline model and Anthropic server tools (web search, web fetch): when the request defines one and the user
 * asks for it, the reply calls it with a `server_tool_use` block followed by the result block the API would add
 * (made up: the fake has no web access), then a sentence about it. Asked to search "thoroughly", the reply stops after
 * the call with `pause_turn`, and the request that continues the turn gets the result — as the API pauses a long turn.
 *
 * Text handling is linear: keyword positions with `indexOf` on the lower-cased text, and single scans to cut a phrase.
 */
import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { FakeBlock, FakeMessageReply } from './wire.js';
import { unchecked, type Unchecked } from './unchecked.js';
import { isDotOrSpace, isSpaceCode, trimWhere } from './scan.js';

type OfferedTool = Unchecked<'name' | 'type' | 'input_schema'>;

/** Whether the request defines the server tool `name` (a definition with a `type` of that family). */
function defines(tools: ReadonlyMap<string, OfferedTool>, name: 'web_search' | 'web_fetch'): boolean {
  const type = tools.get(name)?.type;
  return typeof type === 'string' && type.startsWith(`${name}_`);
}

const MAX_QUERY = 200;

/** The phrase after the first of `markers` in `text` up to the end of its sentence or line, else undefined. */
function phraseAfter(text: string, markers: readonly string[]): string | undefined {
  const lower = text.toLowerCase();
  for (const marker of markers) {
    const at = lower.indexOf(marker);
    if (at < 0) continue;
    let end = at + marker.length;
    while (end < text.length && end - at < MAX_QUERY) {
      const c = text[end];
      if (c === '\n' || c === '?' || c === '!' || (c === '.' && isSpaceCode(text.charCodeAt(end + 1)))) break;
      end++;
    }
    const phrase = trimWhere(
      text.slice(at + marker.length, end),
      (code) => isDotOrSpace(code) || code === 0x22,
    );
    if (phrase) return phrase;
  }
  return undefined;
}

/** The first `http(s)://…` URL of the text (up to white space or a closing quote), else undefined. */
function firstUrl(text: string): string | undefined {
  const at = text.search(/https?:\/\//);
  if (at < 0) return undefined;
  let end = at;
  while (end < text.length && end - at < 2048) {
    const code = text.charCodeAt(end);
    if (isSpaceCode(code) || code === 0x22 || code === 0x3e) break;
    end++;
  }
  return trimWhere(text.slice(at, end), (code) => code === 0x2e || code === 0x2c || code === 0x29);
}

function searchResult(query: string, toolUseId?: string): FakeBlock {
  return {
    type: 'web_search_tool_result',
    tool_use_id: toolUseId,
    content: [
      {
        type: 'web_search_result',
        url: `https://example.com/search?q=${encodeURIComponent(query)}`,
        title: `Offline results for ${query}`,
        encrypted_content: Buffer.from(`offline:${query}`).toString('base64'),
        page_age: null,
      },
    ],
  };
}

function fetchResult(url: string, toolUseId?: string): FakeBlock {
  return {
    type: 'web_fetch_tool_result',
    tool_use_id: toolUseId,
    content: {
      type: 'web_fetch_result',
      url,
      content: {
        type: 'document',
        source: {
          type: 'text',
          media_type: 'text/plain',
          data: `(offline) The page at ${url} was not fetched.`,
        },
      },
      retrieved_at: new Date(0).toISOString(),
    },
  };
}

const summaryOf = (name: string, input: Record<string, unknown>): string =>
  name === 'web_fetch'
    ? `(offline model) I asked to fetch ${String(input['url'])}; the offline model has no web access, so the page is a stand-in.`
    : `(offline model) I searched the web for "${String(input['query'])}"; the offline model has no web access, so the result is made up.`;

/** A reply that uses a server tool the user asked for, or undefined when none applies. */
export function serverToolReply(
  text: string,
  tools: ReadonlyMap<string, OfferedTool>,
): FakeMessageReply | undefined {
  let call:
    { name: 'web_search' | 'web_fetch'; input: Record<string, unknown>; result: FakeBlock } | undefined;
  const url = defines(tools, 'web_fetch') ? firstUrl(text) : undefined;
  if (url && text.toLowerCase().includes('fetch')) {
    call = { name: 'web_fetch', input: { url }, result: fetchResult(url) };
  } else if (defines(tools, 'web_search')) {
    const query = phraseAfter(text, ['search the web for ', 'search for ', 'look up ', 'search the web ']);
    if (query) call = { name: 'web_search', input: { query }, result: searchResult(query) };
  }
  if (!call) return undefined;
  const intro: FakeBlock = { type: 'text', text: `Let me use ${call.name}.` };
  const use: FakeBlock = { type: 'server_tool_use', name: call.name, input: call.input };
  if (text.toLowerCase().includes('thoroughly'))
    return { type: 'message', content: [intro, use], stop_reason: 'pause_turn' };
  return {
    type: 'message',
    content: [intro, use, call.result, { type: 'text', text: summaryOf(call.name, call.input) }],
  };
}

/**
 * The continuation of a paused turn: the conversation ends with an assistant message whose last `server_tool_use` has
 * no result yet; the reply brings the result and the sentence about it. Undefined for any other conversation.
 */
export function continuePausedTurn(messages: readonly BetaMessageParam[]): FakeMessageReply | undefined {
  let last: BetaMessageParam | undefined;
  for (let i = messages.length - 1; i >= 0 && !last; i--)
    if (messages[i]!.role !== 'system') last = messages[i];
  if (!last || last.role !== 'assistant' || !Array.isArray(last.content)) return undefined;
  const blocks = last.content;
  const use = blocks.at(-1);
  if (!use || use.type !== 'server_tool_use') return undefined;
  const input = unchecked<'query' | 'url'>(use.input) ?? {};
  const result =
    use.name === 'web_fetch'
      ? fetchResult(String(input.url), use.id)
      : searchResult(String(input.query ?? ''), use.id);
  return {
    type: 'message',
    content: [result, { type: 'text', text: summaryOf(use.name, { ...input }) }],
  };
}
