/**
 * The offline model: a small deterministic stand-in for Claude, used when the service runs without an API key. It
 * reads the last user turn (offline-turn.ts): tool results are summarised in text (offline-results.ts); the newest
 * text of the turn (a follow-up merged into a tool-results turn, say) is what it answers: a question about the
 * weather, a sum, an expression or the time calls the matching tool when the request offers it, any other offered
 * tool (a client tool, say) is called with an input built from its schema, a web search or fetch uses the Anthropic
 * server tool the request defines (offline-server-tools.ts), and anything else gets a friendly explanation.
 */
import type { FakeBlock, FakeHandler, FakeMessageReply, FakeRequest } from './wire.js';
import { unchecked, type Unchecked } from './unchecked.js';
import { conversationStart } from './compaction.js';
import { extractExpression, extractNumbers, extractPlaces, extractZoneNames } from './text.js';
import { inputFor, pickTool, type AnyTool } from './any-tool.js';
import { continuePausedTurn, serverToolReply } from './server-tools.js';
import { findToolUse, lastUserTurn, turnFromSummary, type UserTurn } from './turn.js';
import { summarizeResult } from './results.js';

export { extractExpression, extractPlaces };

/** A tool the request offers, as far as the offline model reads it. */
export type OfferedTool = Unchecked<'name' | 'input_schema' | 'description' | 'type'>;

/** Tools the request offers by name: `tools`, plus `tool_addition` (less `tool_removal`) blocks of system messages. */
export function availableTools(req: FakeRequest): Map<string, OfferedTool> {
  const tools = new Map<string, OfferedTool>();
  for (const raw of req.tools) {
    const tool = unchecked<'name' | 'input_schema' | 'description' | 'type'>(raw);
    if (tool && typeof tool.name === 'string') tools.set(tool.name, tool);
  }
  for (const message of req.messages) {
    if (message.role !== 'system' || !Array.isArray(message.content)) continue;
    for (const block of message.content) {
      if (block.type === 'text') continue;
      const tool = block.tool;
      const definition =
        tool.type === 'tool_definition'
          ? unchecked<'name' | 'input_schema' | 'description' | 'type'>(tool.definition)
          : undefined;
      const name = definition ? definition.name : 'name' in tool ? tool.name : undefined;
      if (typeof name !== 'string') continue;
      if (block.type === 'tool_addition') tools.set(name, definition ?? { name });
      if (block.type === 'tool_removal') tools.delete(name);
    }
  }
  return tools;
}

export const offlineHandler: FakeHandler = (req) => offlineReply(req);

/** The tools the offline model has a script for; any other offered tool is called through `pickTool`. */
const SCRIPTED = new Set(['get_weather', 'calculate_sum', 'evaluate_expression', 'current_time']);

/** The offline model's reply to `req`. */
export function offlineReply(req: FakeRequest): FakeMessageReply {
  const tools = availableTools(req);
  // After a compaction the model reads from the summary on; with no user turn after it, it goes on from the summary.
  const messages = req.messages.slice(conversationStart(req.messages));
  const paused = continuePausedTurn(messages);
  if (paused) return paused;
  const turn = lastUserTurn(messages) ?? turnFromSummary(messages);
  if (!turn) {
    return say('(offline model) There is nothing new to answer. Ask me something!');
  }

  const summaries = turn.results.map((result) =>
    summarizeResult(result, findToolUse(turn.previousAssistant, result.tool_use_id)),
  );
  const upstream = turn.results.length ? undefined : serverToolReply(turn.newest, tools);
  if (upstream) return upstream;
  // The newest text is the question: a follow-up sent while tools ran (merged after their results) or an interrupt
  // (merged after the question it replaces) is answered, not the question before it.
  const plan = planTools(turn.newest, tools);
  if (!plan.calls.length && !plan.clarify && turn.newest.trim()) {
    // "And in Tokyo?" goes on with what was asked before: the tools just answered, or the earlier text of the turn.
    const intent = intentOf(turn, tools);
    const names = intent && (extractPlaces(turn.newest).length || extractZoneNames(turn.newest).length);
    if (names) Object.assign(plan, planTools(`${intent} ${turn.newest}`, tools));
  }
  if (!plan.calls.length && !plan.clarify && turn.newest.trim()) {
    // A tool without a script (a client tool, say): the best match by name and description; for a new question
    // with no match the first one, but a follow-up to results calls one only when it names it.
    const other = otherTool(turn.newest, tools, summaries.length > 0);
    if (other) {
      plan.calls.push(call(other.name, inputFor(other, turn.newest)));
      plan.notes.push(`call ${other.name}`);
    }
  }

  if (plan.calls.length) {
    const intro = [...summaries, `Let me ${plan.notes.join(' and ')}.`].join(' ');
    return { type: 'message', content: [{ type: 'text', text: intro }, ...plan.calls] };
  }
  const answer = plan.clarify ?? (turn.newest.trim() ? introduction(turn.newest, tools) : undefined);
  if (summaries.length) return say([...summaries, ...(answer ? [answer] : [])].join(' '));
  return say(answer ?? introduction(turn.text, tools));
}

/** What the newest text goes on with: "weather" or "time", from the calls just answered or the turn's earlier text. */
function intentOf(turn: UserTurn, tools: Map<string, OfferedTool>): string | undefined {
  const answered = new Set(
    turn.results.map((r) => findToolUse(turn.previousAssistant, r.tool_use_id)?.name ?? ''),
  );
  const earlier = turn.text.slice(0, Math.max(0, turn.text.length - turn.newest.length));
  if (tools.has('get_weather') && (answered.has('get_weather') || WEATHER.test(earlier))) return 'weather';
  if (tools.has('current_time') && (answered.has('current_time') || CLOCK.test(earlier))) return 'time';
  return undefined;
}

/** An offered tool without a script, with a name and an input schema (a typed server tool runs upstream). */
function otherTool(text: string, tools: Map<string, OfferedTool>, mustMatch: boolean): AnyTool | undefined {
  const candidates: AnyTool[] = [];
  for (const [name, tool] of tools) {
    if (SCRIPTED.has(name) || (tool.type !== undefined && tool.type !== 'custom')) continue;
    if (typeof tool.input_schema !== 'object' || tool.input_schema === null) continue;
    candidates.push({ name, description: tool.description, input_schema: tool.input_schema });
  }
  return pickTool(text, candidates, mustMatch);
}

function say(text: string): FakeMessageReply {
  return { type: 'message', content: [{ type: 'text', text }] };
}

const WEATHER = /\b(weather|forecast|temperature|raining|rain|sunny|snowing)\b/i;
const CLOCK = /\b(time|clock)\b/i;

interface Plan {
  calls: FakeBlock[];
  /** What the calls do, for the text before them: "check the weather in Paris". */
  notes: string[];
  /** A question back when an intent lacks what its tool needs. */
  clarify?: string;
}

function planTools(text: string, tools: Map<string, OfferedTool>): Plan {
  const plan: Plan = { calls: [], notes: [] };
  if (!text.trim()) return plan;
  const places = extractPlaces(text);

  const weather = tools.get('get_weather');
  if (weather && WEATHER.test(text)) {
    if (places.length) {
      const key = inputKey(weather, ['location', 'city', 'place'], 'location');
      for (const place of places) plan.calls.push(call('get_weather', { [key]: place }));
      plan.notes.push(`check the weather in ${list(places)}`);
    } else {
      plan.clarify = 'Which city should I check? For example: "What\'s the weather in Paris?"';
    }
  }

  const clock = tools.get('current_time');
  if (clock && CLOCK.test(text)) {
    const zones = extractZones(text, places);
    const key = inputKey(clock, ['timezone', 'tz', 'time_zone', 'zone'], 'timezone');
    for (const zone of zones) plan.calls.push(call('current_time', { [key]: zone }));
    plan.notes.push(`look up the time in ${list(zones)}`);
  }

  const memory = tools.has('memory') ? planMemory(text) : undefined;
  if (memory) {
    plan.calls.push(memory.call);
    plan.notes.push(memory.note);
  }

  const math = planMath(text, tools);
  if (math) {
    plan.calls.push(math.call);
    plan.notes.push(math.note);
  }
  return plan;
}

/** The file the offline model keeps what it is told to remember in (the memory tool's paths start at /memories). */
export const OFFLINE_MEMORY_FILE = '/memories/notes.md';
const REMEMBER = /^\s*(?:please\s+)?remember\b[\s:,]*/i;
const RECALL = /\b(?:what do you remember|recall|your memory|your memories)\b/i;

/**
 * The memory tool (`betaMemoryTool`, `"memory"` in a session's tools): "remember …" writes the rest of the text to
 * one notes file, a question about what it remembers views that file. Patterns are anchored or bounded
 * alternations: linear in the text.
 */
function planMemory(text: string): { call: FakeBlock; note: string } | undefined {
  const remember = REMEMBER.exec(text);
  if (remember) {
    const note = text.slice(remember[0].length).trim().slice(0, 4000);
    if (!note) return undefined;
    return {
      call: call('memory', { command: 'create', path: OFFLINE_MEMORY_FILE, file_text: `${note}\n` }),
      note: 'write that down in my memory',
    };
  }
  if (RECALL.test(text)) {
    return {
      call: call('memory', { command: 'view', path: OFFLINE_MEMORY_FILE }),
      note: 'look in my memory',
    };
  }
  return undefined;
}

function call(name: string, input: Record<string, unknown>): FakeBlock {
  return { type: 'tool_use', name, input };
}

function list(items: string[]): string {
  if (items.length <= 1) return items.join('');
  return `${items.slice(0, -1).join(', ')} and ${items.at(-1)}`;
}

/** The `properties` object of a tool's input schema, if it has one. */
function schemaProperties(tool: OfferedTool | undefined): object | undefined {
  const properties = unchecked<'properties'>(tool?.input_schema)?.properties;
  return typeof properties === 'object' && properties !== null ? properties : undefined;
}

/** The input property to use: the first of `candidates` the schema has, its only property, else `fallback`. */
function inputKey(tool: OfferedTool | undefined, candidates: string[], fallback: string): string {
  const properties = schemaProperties(tool);
  if (!properties) return fallback;
  const found = candidates.find((candidate) => candidate in properties);
  if (found) return found;
  const keys = Object.keys(properties);
  return keys.length === 1 ? keys[0]! : fallback;
}

const ZONES: Record<string, string> = {
  paris: 'Europe/Paris',
  london: 'Europe/London',
  berlin: 'Europe/Berlin',
  madrid: 'Europe/Madrid',
  rome: 'Europe/Rome',
  amsterdam: 'Europe/Amsterdam',
  moscow: 'Europe/Moscow',
  tokyo: 'Asia/Tokyo',
  singapore: 'Asia/Singapore',
  'hong kong': 'Asia/Hong_Kong',
  beijing: 'Asia/Shanghai',
  shanghai: 'Asia/Shanghai',
  dubai: 'Asia/Dubai',
  mumbai: 'Asia/Kolkata',
  delhi: 'Asia/Kolkata',
  'new delhi': 'Asia/Kolkata',
  sydney: 'Australia/Sydney',
  'new york': 'America/New_York',
  chicago: 'America/Chicago',
  toronto: 'America/Toronto',
  'san francisco': 'America/Los_Angeles',
  'los angeles': 'America/Los_Angeles',
  seattle: 'America/Los_Angeles',
  'são paulo': 'America/Sao_Paulo',
  'sao paulo': 'America/Sao_Paulo',
  utc: 'UTC',
  gmt: 'UTC',
};

/** IANA zones named in the text, else the zones of the places it names, else UTC. */
function extractZones(text: string, places: string[]): string[] {
  const named = extractZoneNames(text);
  if (named.length) return named;
  const zones = places.map((place) => ZONES[place.toLowerCase()]).filter((zone): zone is string => !!zone);
  if (/\b(UTC|GMT)\b/.test(text)) zones.push('UTC');
  return zones.length ? [...new Set(zones)] : ['UTC'];
}

function planMath(
  text: string,
  tools: Map<string, OfferedTool>,
): { call: FakeBlock; note: string } | undefined {
  const sumTool = tools.get('calculate_sum');
  const evalTool = tools.get('evaluate_expression');
  if (!sumTool && !evalTool) return undefined;
  const expression = extractExpression(text);
  const complex =
    !!expression && (/[*/^%()]/.test(expression) || (expression.match(/[-+]/g) ?? []).length > 1);
  if (expression && complex && evalTool) {
    const key = inputKey(evalTool, ['expression', 'expr', 'input'], 'expression');
    return { call: call('evaluate_expression', { [key]: expression }), note: `evaluate ${expression}` };
  }
  const numbers = extractNumbers(text, true);
  const wantsSum =
    /\b(sum|add|adding|plus|total)\b/i.test(text) || (!!expression && expression.includes('+'));
  if (wantsSum && numbers.length >= 2) {
    const a = numbers[0]!;
    const b = numbers[1]!;
    if (sumTool) {
      const properties = schemaProperties(sumTool) ?? {};
      const input = 'numbers' in properties ? { numbers } : { a, b };
      return { call: call('calculate_sum', input), note: `add ${a} and ${b}` };
    }
    const key = inputKey(evalTool, ['expression', 'expr', 'input'], 'expression');
    return { call: call('evaluate_expression', { [key]: `${a} + ${b}` }), note: `add ${a} and ${b}` };
  }
  if (expression && evalTool) {
    const key = inputKey(evalTool, ['expression', 'expr', 'input'], 'expression');
    return { call: call('evaluate_expression', { [key]: expression }), note: `evaluate ${expression}` };
  }
  return undefined;
}

const EXAMPLES: Array<[string, string]> = [
  ['get_weather', '"What\'s the weather in Paris and Tokyo?"'],
  ['calculate_sum', '"What is 2 plus 3?"'],
  ['evaluate_expression', '"What is 2*(3+4)?"'],
  ['current_time', '"What time is it in Tokyo?"'],
];

function introduction(userText: string, tools: Map<string, OfferedTool>): string {
  const lines: string[] = [];
  const said = userText.trim().replace(/\s+/g, ' ');
  lines.push(
    (said ? `You said: "${said.length > 120 ? `${said.slice(0, 117)}...` : said}". ` : '') +
      "I'm the offline model: this service runs without an Anthropic API key, so a small built-in script answers " +
      'instead of Claude. It still drives real tool calls through the tool runner.',
  );
  const examples = EXAMPLES.filter(([name]) => tools.has(name));
  if (examples.length) {
    lines.push('Try asking:');
    for (const [name, example] of examples) lines.push(`- ${example} (${name})`);
  } else if (tools.size) {
    lines.push(`This session offers ${list([...tools.keys()])}: ask for one by name.`);
  } else {
    lines.push('No tools are enabled for this session, so I can only chat.');
  }
  return lines.join('\n');
}
