import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { z } from 'zod';
import type { ServerTool } from './types.js';

export interface LocalTime {
  timezone: string;
  /** Local wall-clock time with its offset, e.g. `2024-05-01T14:03:22+02:00`. */
  local_time: string;
  /** `+02:00`, `-05:30`, `+00:00`. */
  utc_offset: string;
  /** English weekday name, e.g. `Wednesday`. */
  weekday: string;
}

function formatterFor(timezone: string): Intl.DateTimeFormat {
  try {
    return new Intl.DateTimeFormat('en-US', {
      timeZone: timezone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
      weekday: 'long',
      timeZoneName: 'longOffset',
    });
  } catch {
    throw new Error(
      `Unknown time zone ${JSON.stringify(timezone)}: use an IANA time zone name such as "Europe/Paris", ` +
        '"America/New_York" or "UTC"',
    );
  }
}

/** The wall-clock time in `timezone` (an IANA name) at `now`. Throws a clear error for an unknown zone. */
export function localTimeIn(timezone: string, now: Date = new Date()): LocalTime {
  const parts = new Map<string, string>();
  for (const part of formatterFor(timezone).formatToParts(now)) parts.set(part.type, part.value);
  const get = (type: string): string => {
    const value = parts.get(type);
    if (value === undefined) throw new Error(`Could not format the time in ${timezone} (no ${type})`);
    return value;
  };
  // `longOffset` gives "GMT+02:00", "GMT-05:30", or plain "GMT" for a zero offset.
  const zoneName = get('timeZoneName');
  const offset = zoneName === 'GMT' || zoneName === 'UTC' ? '+00:00' : zoneName.replace(/^(GMT|UTC)/, '');
  if (!/^[+-]\d{2}:\d{2}$/.test(offset)) {
    throw new Error(`Could not determine the UTC offset of ${timezone} (got ${JSON.stringify(zoneName)})`);
  }
  const date = `${get('year')}-${get('month')}-${get('day')}`;
  const time = `${get('hour')}:${get('minute')}:${get('second')}`;
  return { timezone, local_time: `${date}T${time}${offset}`, utc_offset: offset, weekday: get('weekday') };
}

const currentTimeTool: ServerTool = {
  tool: betaZodTool({
    name: 'current_time',
    description:
      'Get the current local date and time in an IANA time zone. Returns JSON with local_time (ISO 8601 with ' +
      'offset), utc_offset and weekday.',
    inputSchema: z.object({
      timezone: z
        .string()
        .trim()
        .min(1)
        .max(100)
        .describe('An IANA time zone name, e.g. "Europe/Paris", "America/New_York" or "UTC"'),
    }),
    run: ({ timezone }) => JSON.stringify(localTimeIn(timezone)),
  }),
  requiresApproval: false,
  idempotent: true,
};

export default currentTimeTool;
