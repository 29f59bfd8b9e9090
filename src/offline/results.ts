/**
 * What the offline model says of a tool result: one sentence per result, worded for the scripted tools (weather,
 * sum, expression, time) and generic for any other tool or an error.
 */
import type {
  BetaToolResultBlockParam,
  BetaToolUseBlockParam,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { unchecked } from './unchecked.js';
import { isDotOrSpace, trimEndWhere } from './scan.js';

function resultText(content: BetaToolResultBlockParam['content']): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '(no output)';
  const parts = content.map((block) =>
    block.type === 'text' && typeof block.text === 'string' ? block.text : `[${String(block.type)}]`,
  );
  return parts.join(' ') || '(no output)';
}

/** The sentence for `result`, worded by the tool that `toolUse` called. */
export function summarizeResult(
  result: BetaToolResultBlockParam,
  toolUse: BetaToolUseBlockParam | undefined,
): string {
  let out = trimEndWhere(resultText(result.content).trimStart(), isDotOrSpace);
  const name: string = toolUse?.name ?? 'the tool';
  const input =
    unchecked<'location' | 'city' | 'place' | 'expression' | 'timezone' | 'tz' | 'zone'>(toolUse?.input) ??
    {};
  if (result.is_error) return `${name} failed: ${out}.`;
  switch (name) {
    case 'get_weather': {
      const place = input.location ?? input.city ?? input.place;
      // "Simulated weather in Paris: sunny, 21°C" reads as "The weather in Paris is sunny, 21°C".
      const prefix = /^([^:]{0,80}):\s*/.exec(out);
      if (prefix && place && prefix[1]!.toLowerCase().includes(String(place).toLowerCase())) {
        out = out.slice(prefix[0].length);
      }
      if (/^[A-Z][a-z]/.test(out)) out = out[0]!.toLowerCase() + out.slice(1);
      return place ? `The weather in ${String(place)} is ${out}.` : `The weather is ${out}.`;
    }
    case 'calculate_sum':
      return `The sum is ${out}.`;
    case 'evaluate_expression':
      return input.expression ? `${String(input.expression)} = ${out}.` : `The result is ${out}.`;
    case 'current_time': {
      const zone = input.timezone ?? input.tz ?? input.zone;
      const time = parseTime(out);
      if (time) out = time;
      return zone ? `The current time in ${String(zone)} is ${out}.` : `The current time is ${out}.`;
    }
    default:
      return `${name} returned: ${out}.`;
  }
}

/** `14:03 on Wednesday (2024-05-01T14:03:22+02:00)` from a JSON result with `local_time`, else undefined. */
function parseTime(out: string): string | undefined {
  if (!out.startsWith('{')) return undefined;
  try {
    const parsed = unchecked<'local_time' | 'weekday'>(JSON.parse(out));
    if (!parsed || typeof parsed.local_time !== 'string') return undefined;
    const clock = /T(\d{2}:\d{2})/.exec(parsed.local_time)?.[1];
    const day = typeof parsed.weekday === 'string' ? ` on ${parsed.weekday}` : '';
    return clock ? `${clock}${day} (${parsed.local_time})` : parsed.local_time;
  } catch {
    return undefined;
  }
}
