import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { z } from 'zod';
import type { ServerTool } from './types.js';

const CONDITIONS = [
  'sunny',
  'partly cloudy',
  'cloudy',
  'foggy',
  'light rain',
  'heavy rain',
  'thunderstorms',
  'windy',
  'snow',
] as const;

/** 32-bit FNV-1a over the UTF-16 code units of `text`. */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i += 1) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}

export interface SimulatedWeather {
  location: string;
  unit: 'celsius' | 'fahrenheit';
  temperature: number;
  conditions: string;
  humidityPercent: number;
  windKph: number;
}

/**
 * Fake but stable weather for a location: every value is derived from a hash of the location (trimmed, case and
 * inner whitespace folded), so the same place always gets the same weather and the tool is idempotent.
 */
export function simulateWeather(
  location: string,
  unit: 'celsius' | 'fahrenheit' = 'celsius',
): SimulatedWeather {
  const key = location.trim().replace(/\s+/g, ' ').toLowerCase();
  const hash = fnv1a(key);
  const celsius = (hash % 46) - 10; // -10 .. 35 °C
  const conditionIndex = (hash >>> 8) % CONDITIONS.length;
  const conditions = CONDITIONS[conditionIndex] ?? 'sunny';
  const humidityPercent = 20 + ((hash >>> 16) % 76); // 20 .. 95 %
  const windKph = (hash >>> 24) % 41; // 0 .. 40 km/h
  const temperature = unit === 'fahrenheit' ? Math.round((celsius * 9) / 5 + 32) : celsius;
  return { location: location.trim(), unit, temperature, conditions, humidityPercent, windKph };
}

const getWeatherTool: ServerTool = {
  tool: betaZodTool({
    name: 'get_weather',
    description:
      'Get the current weather in a given location. The data is SIMULATED (a deterministic fake derived from the ' +
      'location name, for demos and tests), not a real forecast.',
    inputSchema: z.object({
      location: z.string().trim().min(1).max(200).describe('The city and country, e.g. "Paris, France"'),
      unit: z.enum(['celsius', 'fahrenheit']).describe('Temperature unit; defaults to celsius').optional(),
    }),
    run: ({ location, unit }) => {
      const w = simulateWeather(location, unit ?? 'celsius');
      const symbol = w.unit === 'fahrenheit' ? '°F' : '°C';
      return (
        `Simulated weather in ${w.location}: ${w.conditions}, ${w.temperature}${symbol}, ` +
        `humidity ${w.humidityPercent}%, wind ${w.windKph} km/h.`
      );
    },
  }),
  requiresApproval: false,
  idempotent: true,
};

export default getWeatherTool;
