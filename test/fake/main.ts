/**
 * The fake Anthropic API as its own process:
 *
 *   node --import tsx test/fake/main.ts --port 0 --event-delay-ms 20 [--script tool-loop:N[:tool]] [--api-key K]
 *
 * Prints one line of JSON, `{"url":"http://127.0.0.1:PORT"}`, once listening, and exits on SIGTERM / SIGINT. Other
 * processes script it over HTTP: `POST /_fake/enqueue` (a reply or an array of replies), `GET /_fake/requests`,
 * `POST /_fake/reset`, `POST /_fake/pacing` `{"eventDelayMs"}`, `POST /_fake/forget-threads`, `POST /_fake/script`
 * `{"script"}` and `GET /_fake/stats`.
 */
import { parseArgs } from 'node:util';
import { startFakeAnthropic } from './server.js';
import { parseScript } from './script.js';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    host: { type: 'string', default: '127.0.0.1' },
    'event-delay-ms': { type: 'string', default: '0' },
    script: { type: 'string', default: 'offline' },
    'api-key': { type: 'string' },
    'no-record': { type: 'boolean', default: false },
  },
  strict: true,
});

function number(name: string, value: string): number {
  const parsed = Number(value);
  if (!Number.isFinite(parsed) || parsed < 0) {
    process.stderr.write(`--${name} must be a number >= 0, got ${JSON.stringify(value)}\n`);
    process.exit(2);
  }
  return parsed;
}

let handler;
try {
  handler = parseScript(values.script);
} catch (error) {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(2);
}

const fake = await startFakeAnthropic({
  port: number('port', values.port),
  host: values.host,
  eventDelayMs: number('event-delay-ms', values['event-delay-ms']),
  handler,
  apiKey: values['api-key'],
  record: !values['no-record'],
});
process.stdout.write(`${JSON.stringify({ url: fake.url })}\n`);

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  fake.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
