import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { runRunnableTool, type BetaRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import calculateSum from '../../tools/calculate_sum.js';
import currentTime, { localTimeIn } from '../../tools/current_time.js';
import evaluateExpressionTool, {
  evaluateExpression,
  ExpressionError,
  formatResult,
  MAX_EXPRESSION_LENGTH,
} from '../../tools/evaluate_expression.js';
import getWeather, { simulateWeather } from '../../tools/get_weather.js';
import { serverTools, toolSchemas } from '../../tools/index.js';

let nextId = 0;

/** Runs a tool the way the SDK's tool runner does: parse (zod), run, and turn a throw into an error result. */
async function run(tool: BetaRunnableTool, input: unknown): Promise<{ content: unknown; isError: boolean }> {
  nextId += 1;
  const name = 'name' in tool ? tool.name : 'unknown';
  const toolUse = { type: 'tool_use' as const, id: `toolu_test_${nextId}`, name, input };
  return runRunnableTool(tool, input, { toolUse, toolUseBlock: toolUse });
}

async function runOk(tool: BetaRunnableTool, input: unknown): Promise<string> {
  const outcome = await run(tool, input);
  assert.equal(outcome.isError, false, `expected success, got ${JSON.stringify(outcome.content)}`);
  assert.equal(typeof outcome.content, 'string');
  return outcome.content as string;
}

async function runErr(tool: BetaRunnableTool, input: unknown): Promise<string> {
  const outcome = await run(tool, input);
  assert.equal(outcome.isError, true, `expected an error, got ${JSON.stringify(outcome.content)}`);
  assert.equal(typeof outcome.content, 'string');
  return outcome.content as string;
}

function evalText(expression: string): string {
  return formatResult(evaluateExpression(expression));
}

function evalError(expression: string, message: RegExp): void {
  assert.throws(
    () => evaluateExpression(expression),
    (e: unknown) => {
      assert.ok(e instanceof ExpressionError, `expected an ExpressionError for ${expression}`);
      assert.match(e.message, message);
      assert.match(e.message, /at position \d+/);
      return true;
    },
  );
}

describe('tools/index', () => {
  test('serverTools holds every tool by name', () => {
    assert.deepEqual(
      [...serverTools.keys()].sort(),
      ['calculate_sum', 'current_time', 'evaluate_expression', 'get_weather'].sort(),
    );
    for (const [name, st] of serverTools) {
      assert.equal('name' in st.tool ? st.tool.name : undefined, name);
      assert.equal(typeof st.tool.run, 'function');
      assert.equal(typeof st.tool.parse, 'function');
    }
  });

  test('toolSchemas gives name, description, input_schema and flags', () => {
    const schemas = toolSchemas();
    assert.equal(schemas.length, serverTools.size);
    for (const s of schemas) {
      assert.ok(s.description.length > 10, s.name);
      assert.equal(s.input_schema['type'], 'object');
      assert.equal(typeof s.input_schema['properties'], 'object');
      assert.equal(s.requires_approval, false);
      assert.equal(s.idempotent, true);
    }
    const weather = schemas.find((s) => s.name === 'get_weather');
    assert.ok(weather);
    assert.match(weather.description, /simulated/i);
    const props = weather.input_schema['properties'] as Record<
      string,
      { description?: string; enum?: string[] }
    >;
    assert.ok(props['location']?.description);
    assert.deepEqual(props['unit']?.enum, ['celsius', 'fahrenheit']);
    assert.deepEqual(weather.input_schema['required'], ['location']);
  });
});

describe('get_weather', () => {
  test('is deterministic for a location and consistent between units', async () => {
    const a = await runOk(getWeather.tool, { location: 'Paris, France' });
    const b = await runOk(getWeather.tool, { location: 'Paris, France' });
    assert.equal(a, b);
    assert.match(a, /^Simulated weather in Paris, France: .+, -?\d+°C, humidity \d+%, wind \d+ km\/h\.$/);
    const c = simulateWeather('Paris, France', 'celsius');
    const f = simulateWeather('  paris,   FRANCE ', 'fahrenheit');
    assert.equal(f.temperature, Math.round((c.temperature * 9) / 5 + 32));
    assert.equal(f.conditions, c.conditions);
    const fText = await runOk(getWeather.tool, { location: 'Paris, France', unit: 'fahrenheit' });
    assert.match(fText, new RegExp(`${f.temperature}°F`));
    assert.equal(getWeather.requiresApproval, false);
    assert.equal(getWeather.idempotent, true);
  });

  test('different locations get varied weather within plausible ranges', () => {
    const cities = ['Tokyo', 'Lima', 'Oslo', 'Cairo', 'Sydney', 'Toronto', 'Nairobi', 'Reykjavik'];
    const temps = new Set<number>();
    for (const city of cities) {
      const w = simulateWeather(city);
      temps.add(w.temperature);
      assert.ok(w.temperature >= -10 && w.temperature <= 35);
      assert.ok(w.humidityPercent >= 20 && w.humidityPercent <= 95);
      assert.ok(w.windKph >= 0 && w.windKph <= 40);
    }
    assert.ok(temps.size > 1);
  });

  test('rejects bad input as an error result', async () => {
    assert.match(await runErr(getWeather.tool, { location: '' }), /^Error: /);
    await runErr(getWeather.tool, { location: '   ' });
    await runErr(getWeather.tool, { location: 'Paris', unit: 'kelvin' });
    await runErr(getWeather.tool, {});
    await runErr(getWeather.tool, { location: 42 });
  });
});

describe('calculate_sum', () => {
  test('adds two numbers', async () => {
    assert.equal(await runOk(calculateSum.tool, { a: 2, b: 3 }), '5');
    assert.equal(await runOk(calculateSum.tool, { a: -1.5, b: 0.25 }), '-1.25');
    assert.equal(await runOk(calculateSum.tool, { a: -0, b: 0 }), '0');
    assert.equal(calculateSum.idempotent, true);
  });

  test('rejects non-numbers and overflow', async () => {
    await runErr(calculateSum.tool, { a: '2', b: 3 });
    await runErr(calculateSum.tool, { a: 2 });
    assert.match(await runErr(calculateSum.tool, { a: 1e308, b: 1e308 }), /too large/);
  });
});

describe('evaluate_expression: evaluator', () => {
  test('numbers', () => {
    assert.equal(evalText('42'), '42');
    assert.equal(evalText('3.25'), '3.25');
    assert.equal(evalText('.5'), '0.5');
    assert.equal(evalText('1.5e3'), '1500');
    assert.equal(evalText('2E-2'), '0.02');
    assert.equal(evalText('  7  '), '7');
  });

  test('precedence', () => {
    assert.equal(evalText('1 + 2 * 3'), '7');
    assert.equal(evalText('(1 + 2) * 3'), '9');
    assert.equal(evalText('10 - 4 / 2'), '8');
    assert.equal(evalText('2 * 3 ^ 2'), '18');
    assert.equal(evalText('7 + 10 % 4'), '9');
    assert.equal(evalText('-2 ^ 2'), '-4');
    assert.equal(evalText('(-2) ^ 2'), '4');
    assert.equal(evalText('2 ^ -1'), '0.5');
  });

  test('associativity', () => {
    assert.equal(evalText('10 - 3 - 2'), '5');
    assert.equal(evalText('100 / 10 / 5'), '2');
    assert.equal(evalText('2 ^ 3 ^ 2'), '512');
    assert.equal(evalText('17 % 5 % 3'), '2');
  });

  test('unary operators', () => {
    assert.equal(evalText('-3'), '-3');
    assert.equal(evalText('+3'), '3');
    assert.equal(evalText('--3'), '3');
    assert.equal(evalText('2 - -3'), '5');
    assert.equal(evalText('-(2 + 3)'), '-5');
    assert.equal(evalText('-0'), '0');
  });

  test('constants and functions', () => {
    assert.equal(evalText('pi'), String(Number(Math.PI.toPrecision(15))));
    assert.equal(evalText('e'), String(Number(Math.E.toPrecision(15))));
    assert.equal(evalText('PI * 2'), String(Number((Math.PI * 2).toPrecision(15))));
    assert.equal(evalText('sqrt(16)'), '4');
    assert.equal(evalText('abs(-2.5)'), '2.5');
    assert.equal(evalText('min(3, 1, 2)'), '1');
    assert.equal(evalText('max(3, 1, 2)'), '3');
    assert.equal(evalText('round(2.5)'), '3');
    assert.equal(evalText('round(-2.5)'), '-3');
    assert.equal(evalText('round(3.14159, 2)'), '3.14');
    assert.equal(evalText('floor(-1.5)'), '-2');
    assert.equal(evalText('ceil(1.2)'), '2');
    assert.equal(evalText('log(1000)'), '3');
    assert.equal(evalText('log(8, 2)'), '3');
    assert.equal(evalText('ln(e)'), '1');
    assert.equal(evalText('sin(0)'), '0');
    assert.equal(evalText('cos(pi)'), '-1');
    assert.equal(evalText('tan(0)'), '0');
    assert.equal(evalText('sqrt(max(9, 16)) + abs(min(-1, -2))'), '6');
  });

  test('floating-point noise is rounded away', () => {
    assert.equal(evalText('0.1 + 0.2'), '0.3');
    assert.equal(evalText('1.1 * 3'), '3.3');
  });

  test('syntax errors name the position', () => {
    evalError('', /Empty expression/);
    evalError('1 +', /Unexpected end of expression at position 4/);
    evalError('2 3', /Unexpected number '3' at position 3/);
    evalError('(1 + 2', /Expected '\)'.* at position 7/);
    evalError('1 + 2)', /Unexpected '\)' at position 6/);
    evalError('1 # 2', /Unexpected character "#" at position 3/);
    evalError('* 2', /Unexpected '\*' at position 1/);
    evalError('sqrt 4', /must be followed by '\('/);
    evalError('max(1,)', /Unexpected '\)' at position 7/);
    evalError('sqrt(1, 2)', /takes 1 argument/);
    evalError('min()', /at least 1/);
    evalError('pi(2)', /is a constant/);
    evalError('2 ** 3', /Unexpected '\*' at position 4/);
  });

  test('arithmetic errors', () => {
    evalError('1 / 0', /Division by zero at position 3/);
    evalError('1 / (2 - 2)', /Division by zero/);
    evalError('5 % 0', /Modulo by zero/);
    evalError('sqrt(-1)', /negative/);
    evalError('ln(0)', /non-positive/);
    evalError('log(-1)', /non-positive/);
    evalError('log(8, 1)', /base/);
    evalError('10 ^ 400', /too large/);
    evalError('1e400', /too large/);
    evalError('(-8) ^ 0.5', /not a number/);
    evalError('round(1, 0.5)', /digits/);
  });

  test('unknown identifiers and code are rejected', () => {
    evalError('constructor', /Unknown identifier 'constructor'/);
    evalError('__proto__', /Unknown identifier '__proto__'/);
    evalError('toString', /Unknown identifier/);
    evalError('hasOwnProperty(1)', /Unknown identifier/);
    evalError('process', /Unknown identifier 'process' .*at position 1$/);
    assert.throws(() => evaluateExpression('process.exit(1)'), ExpressionError);
    assert.throws(() => evaluateExpression('Math.PI'), ExpressionError);
    assert.throws(() => evaluateExpression('this'), ExpressionError);
    assert.throws(() => evaluateExpression('"1" + 1'), ExpressionError);
    assert.throws(() => evaluateExpression('[1]'), ExpressionError);
    assert.throws(() => evaluateExpression('a = 1'), ExpressionError);
  });

  test('limits: length and nesting depth', () => {
    const long = '1+'.repeat(MAX_EXPRESSION_LENGTH) + '1';
    evalError(long, /too long/);
    assert.equal(evalText('1' + '+1'.repeat(400)), '401');
    evalError('('.repeat(200) + '1' + ')'.repeat(200), /nested too deeply/);
    evalError('-'.repeat(200) + '1', /nested too deeply/);
    evalError('2^'.repeat(200) + '1', /nested too deeply/);
    evalError('abs('.repeat(100) + '1' + ')'.repeat(100), /nested too deeply/);
    assert.equal(evalText('('.repeat(20) + '1' + ')'.repeat(20)), '1');
  });
});

describe('evaluate_expression: tool', () => {
  test('returns the result as a string', async () => {
    assert.equal(await runOk(evaluateExpressionTool.tool, { expression: '2 * (3 + 4) ^ 2' }), '98');
    assert.equal(evaluateExpressionTool.idempotent, true);
  });

  test('a throwing evaluation becomes is_error through runRunnableTool', async () => {
    const content = await runErr(evaluateExpressionTool.tool, { expression: '1 / 0' });
    assert.equal(content, 'Error: Division by zero at position 3');
    assert.match(
      await runErr(evaluateExpressionTool.tool, { expression: 'process.exit(1)' }),
      /^Error: .*position/,
    );
    await runErr(evaluateExpressionTool.tool, { expression: 12 });
  });
});

describe('current_time', () => {
  const instant = new Date('2024-05-01T12:03:22Z');

  test('local time, offset and weekday for IANA zones', () => {
    assert.deepEqual(localTimeIn('Europe/Paris', instant), {
      timezone: 'Europe/Paris',
      local_time: '2024-05-01T14:03:22+02:00',
      utc_offset: '+02:00',
      weekday: 'Wednesday',
    });
    assert.equal(localTimeIn('UTC', instant).local_time, '2024-05-01T12:03:22+00:00');
    assert.equal(localTimeIn('Asia/Kolkata', instant).utc_offset, '+05:30');
    const ny = localTimeIn('America/New_York', new Date('2024-01-01T02:00:00Z'));
    assert.equal(ny.local_time, '2023-12-31T21:00:00-05:00');
    assert.equal(ny.weekday, 'Sunday');
    assert.equal(
      localTimeIn('Europe/Paris', new Date('2024-01-15T23:30:00Z')).local_time,
      '2024-01-16T00:30:00+01:00',
    );
  });

  test('the tool returns JSON for now', async () => {
    const before = Date.now();
    const text = await runOk(currentTime.tool, { timezone: 'Europe/Paris' });
    const parsed = JSON.parse(text) as {
      local_time: string;
      utc_offset: string;
      weekday: string;
      timezone: string;
    };
    assert.equal(parsed.timezone, 'Europe/Paris');
    assert.match(parsed.local_time, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}$/);
    assert.match(parsed.utc_offset, /^\+0[12]:00$/);
    const at = Date.parse(parsed.local_time);
    assert.ok(Math.abs(at - before) < 5000, 'local_time with its offset is the current instant');
    assert.ok(
      ['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday'].includes(parsed.weekday),
    );
    assert.equal(currentTime.idempotent, true);
  });

  test('an invalid zone is a clear error', async () => {
    assert.throws(() => localTimeIn('Mars/Olympus_Mons', instant), /Unknown time zone "Mars\/Olympus_Mons"/);
    assert.match(
      await runErr(currentTime.tool, { timezone: 'Not/AZone' }),
      /^Error: Unknown time zone.*IANA/,
    );
    await runErr(currentTime.tool, { timezone: '' });
  });
});
