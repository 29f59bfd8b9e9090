/**
 * Client tools with `"validate": true` (spec §7.1): the model's input is checked against the tool's `input_schema`
 * before the session waits for the client; an invalid input is answered at once with an `is_error` result listing
 * the violations as `betaZodTool` words them (`Error: ` + the zod issues as JSON: the SDK's tool runner answers a
 * zod `parse` failure with the error's message, which zod makes of its issues).
 *
 * Schemas are compiled here (src/schemas.ts only checks them against the meta-schema), each in a fresh Ajv instance
 * that is dropped with it: nothing one tenant's schema registers (`$id`, anchors) is seen by another compile, and
 * the root `$id` / `$schema` are left out. Compiled validators are kept in one LRU bounded in entries, in schema
 * bytes and per tenant. A schema is at most TOOL_SCHEMA_MAX_BYTES and MAX_SCHEMA_NODES objects; a compile slower than
 * `COMPILE_BUDGET_MS` (or one that fails, or one past the tenant's compile time for the minute) is refused at create
 * (400) and, met at run time, leaves the call unchecked (the client gets it). Patterns run on RE2 (`re2`).
 *
 * Compile time is this thread's CPU time (`process.threadCpuUsage`), not the wall clock: the budget bounds the work a
 * schema makes the event loop do, whatever else the machine runs. On a busy machine (other processes on the cores)
 * the wall clock of a compile is several times its CPU — a process's first compile of a one-property schema (ajv
 * warming up, ~50 ms of CPU) took 745 ms and was refused, its refusal cached for the tenant — and how long the loop
 * is then held is the machine's load, not the schema's. (V8 work on helper threads, parallel GC, is not counted.)
 */
import { createHash } from 'node:crypto';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { RE2JS } from 're2js';

const MAX_ENTRIES = 1024;
const MAX_PER_TENANT = 64;
const MAX_CACHED_BYTES = 16 * 1024 * 1024;
const COMPILE_BUDGET_MS = 250;
/**
 * Most objects (subschemas, keyword maps) in a schema that is compiled. Compiling runs on the event loop and its
 * time grows faster than the schema (ajv with `allErrors`: 800 `anyOf` branches took 1.3 s where 200 took 0.18 s),
 * so the size is bounded before compiling, not timed after.
 */
const MAX_SCHEMA_NODES = 300;
/** Compile time (ms) one tenant may spend on this process in a minute: past it, its new schemas wait. */
const COMPILE_MS_PER_TENANT_MINUTE = 1000;

/**
 * `pattern` and `patternProperties` run on RE2 (re2js): linear in the input, whatever the pattern, where a
 * backtracking engine takes exponential time on `^(a+)+$` against a tenant's input and stops the loop for everyone.
 * A pattern RE2 cannot run (lookaround, back-references) makes the schema refused at create.
 *
 * Linear is not cheap: a match costs about the program's size times the input's length (re2js: ~0.05–0.2 µs per
 * unit; `[\p{L}]{0,1000}` is a program of 2000 instructions, 10,000 characters against it took 2 s), and compiling
 * costs about the program's size. So a pattern is bounded before it is compiled (its text, its counted
 * repetitions), its program after, and the matching of one input as a whole (MATCH_WORK, program × characters over
 * every string the input holds): past it the strings left are not matched, and the input is invalid.
 */
const PATTERN_MAX_CHARS = 256;
const REPEAT_MAX = 100;
const PROGRAM_MAX = 2000;
const MATCH_WORK = 2_000_000;
/** Characters of all the patterns of one schema: each pattern's compile costs time on the loop. */
const SCHEMA_PATTERN_CHARS = 1024;
let patternCharsLeft = SCHEMA_PATTERN_CHARS;
/** What the input being validated may still spend on patterns (set by `inputViolations`; validation is synchronous). */
let matchWorkLeft = MATCH_WORK;

function re2(pattern: string): { test: (s: string) => boolean } {
  if (pattern.length > PATTERN_MAX_CHARS)
    throw new Error(`a pattern is ${pattern.length} characters; at most ${PATTERN_MAX_CHARS}`);
  patternCharsLeft -= pattern.length;
  if (patternCharsLeft < 0)
    throw new Error(`the patterns of the schema have more than ${SCHEMA_PATTERN_CHARS} characters in all`);
  for (const m of pattern.matchAll(/\{(\d+)(?:,(\d*))?\}/g)) {
    const n = Math.max(Number(m[1]), Number(m[2] || 0));
    if (n > REPEAT_MAX) throw new Error(`a pattern repeats ${n} times (${m[0]}); at most ${REPEAT_MAX}`);
  }
  const re = RE2JS.compile(pattern);
  const size = re.programSize();
  if (size > PROGRAM_MAX)
    throw new Error(`a pattern compiles to ${size} instructions; at most ${PROGRAM_MAX}`);
  return {
    test: (s) => {
      matchWorkLeft -= size * (s.length + 1);
      return matchWorkLeft >= 0 && re.test(s);
    },
  };
}
re2.code = 're2';

/** Compile time spent by tenant in the current minute (windows start at a tenant's first compile in them). */
const compileSpent = new Map<string, { since: number; ms: number }>();

function compileBudgetLeft(tenant: string, now: number): boolean {
  const spent = compileSpent.get(tenant);
  if (!spent || now - spent.since >= 60_000) {
    compileSpent.delete(tenant);
    return true;
  }
  return spent.ms < COMPILE_MS_PER_TENANT_MINUTE;
}

function noteCompile(tenant: string, now: number, ms: number): void {
  const spent = compileSpent.get(tenant);
  if (spent && now - spent.since < 60_000) spent.ms += ms;
  else compileSpent.set(tenant, { since: now, ms });
  // Bounded by the tenants active in a minute; the stale ones go as they are met.
  if (compileSpent.size > 10_000)
    for (const [t, v] of compileSpent) if (now - v.since >= 60_000) compileSpent.delete(t);
}

/** Objects in `v` (arrays walked through), counted up to `max` + 1. */
function nodesOf(v: unknown, max: number, n = 0): number {
  if (n > max || typeof v !== 'object' || v === null) return n;
  if (Array.isArray(v)) {
    for (const x of v) n = nodesOf(x, max, n);
    return n;
  }
  n++;
  for (const x of Object.values(v)) n = nodesOf(x, max, n);
  return n;
}
/** Most violations listed in one result. */
const MAX_ISSUES = 20;

type Compiled = { validate: ValidateFunction } | { problem: string };

interface Entry {
  tenant: string;
  bytes: number;
  compiled: Compiled;
}

/** This thread's CPU time so far (ms): user and system. */
function threadCpuMs(): number {
  const { user, system } = process.threadCpuUsage();
  return (user + system) / 1000;
}

/** Least recently used first. */
const cache = new Map<string, Entry>();
const perTenant = new Map<string, number>();
let cachedBytes = 0;

function forget(key: string): void {
  const e = cache.get(key);
  if (!e) return;
  cache.delete(key);
  cachedBytes -= e.bytes;
  const n = (perTenant.get(e.tenant) ?? 1) - 1;
  if (n <= 0) perTenant.delete(e.tenant);
  else perTenant.set(e.tenant, n);
}

function compile(schema: Record<string, unknown>): Compiled {
  const { $id: _id, $schema: _schema, ...rest } = schema;
  const nodes = nodesOf(rest, MAX_SCHEMA_NODES);
  if (nodes > MAX_SCHEMA_NODES)
    return { problem: `the schema has more than ${MAX_SCHEMA_NODES} subschemas and keyword objects` };
  const t0 = threadCpuMs();
  patternCharsLeft = SCHEMA_PATTERN_CHARS;
  try {
    const ajv = new Ajv({
      strict: false,
      allErrors: true,
      verbose: true,
      addUsedSchema: false,
      logger: false,
      code: { regExp: re2 },
    });
    const validate = ajv.compile(rest);
    const ms = threadCpuMs() - t0;
    if (ms > COMPILE_BUDGET_MS)
      return { problem: `the schema took ${Math.round(ms)} ms to compile (at most ${COMPILE_BUDGET_MS})` };
    return { validate };
  } catch (err) {
    return { problem: `the schema cannot be compiled: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/** The tenant's compiled validator of `schema`, from the cache or compiled now. */
function compiledFor(tenant: string, schema: Record<string, unknown>): Compiled {
  const text = JSON.stringify(schema);
  const key = `${tenant}\n${createHash('sha256').update(text).digest('base64url')}`;
  const hit = cache.get(key);
  if (hit) {
    cache.delete(key);
    cache.set(key, hit);
    return hit.compiled;
  }
  const now = Date.now();
  // Not kept: the same schema compiles once the tenant's minute is over.
  if (!compileBudgetLeft(tenant, now))
    return {
      problem: `this tenant compiled schemas for more than ${COMPILE_MS_PER_TENANT_MINUTE} ms in the last minute; try again later`,
    };
  const t0 = threadCpuMs();
  const compiled = compile(schema);
  noteCompile(tenant, now, threadCpuMs() - t0);
  cache.set(key, { tenant, bytes: text.length, compiled });
  cachedBytes += text.length;
  perTenant.set(tenant, (perTenant.get(tenant) ?? 0) + 1);
  if ((perTenant.get(tenant) ?? 0) > MAX_PER_TENANT) {
    for (const [k, e] of cache) {
      if (e.tenant === tenant) {
        forget(k);
        break;
      }
    }
  }
  while (cache.size > MAX_ENTRIES || cachedBytes > MAX_CACHED_BYTES) {
    const oldest = cache.keys().next();
    if (oldest.done) break;
    forget(oldest.value);
  }
  return compiled;
}

/** Why `schema` cannot validate inputs (a create with `validate: true` is refused for it), or null. */
export function validationProblem(tenant: string, schema: Record<string, unknown>): string | null {
  const c = compiledFor(tenant, schema);
  return 'problem' in c ? c.problem : null;
}

/**
 * The `is_error` text for an input that breaks the schema (`Error: ` + the violations as zod issues, as
 * `betaZodTool` answers), or null when it is valid or the schema cannot be used.
 */
export function inputViolations(
  tenant: string,
  schema: Record<string, unknown>,
  input: unknown,
): string | null {
  const c = compiledFor(tenant, schema);
  matchWorkLeft = MATCH_WORK;
  if ('problem' in c || c.validate(input)) return null;
  const issues = zodIssues(c.validate.errors ?? [], input);
  return `Error: ${JSON.stringify(issues, null, 2)}`;
}

type Path = Array<string | number>;

function pathOf(pointer: string): Path {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((s) => (/^(0|[1-9]\d*)$/.test(s) ? Number(s) : s));
}

function at(value: unknown, path: Path): unknown {
  let v = value;
  for (const p of path) {
    if (typeof v !== 'object' || v === null) return undefined;
    v = Reflect.get(v, p);
  }
  return v;
}

/** zod's names of a value's type, as its messages use them. */
function received(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

const origin = (v: unknown) => (typeof v === 'string' ? 'string' : Array.isArray(v) ? 'array' : received(v));
const unit: Record<string, string> = { string: ' characters', array: ' items', object: ' keys' };

function sizeIssue(e: ErrorObject, path: Path, data: unknown, small: boolean): Record<string, unknown> {
  const limit = Number(Reflect.get(e.params, 'limit'));
  const inclusive = !e.keyword.startsWith('exclusive');
  const o = origin(data);
  const op = `${small ? '>' : '<'}${inclusive ? '=' : ''}`;
  const message =
    o === 'number'
      ? `Too ${small ? 'small' : 'big'}: expected number to be ${op}${limit}`
      : `Too ${small ? 'small' : 'big'}: expected ${o} to have ${op}${limit}${unit[o] ?? ''}`;
  return {
    origin: o,
    code: small ? 'too_small' : 'too_big',
    [small ? 'minimum' : 'maximum']: limit,
    inclusive,
    path,
    message,
  };
}

function zodIssue(e: ErrorObject, input: unknown): Record<string, unknown> {
  const path = pathOf(e.instancePath);
  const data = at(input, path);
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'type': {
      const expected = Array.isArray(p['type']) ? p['type'].join(' | ') : String(p['type']);
      return {
        expected,
        code: 'invalid_type',
        path,
        message: `Invalid input: expected ${expected}, received ${received(data)}`,
      };
    }
    case 'required': {
      const missing = String(p['missingProperty']);
      const props = (e.parentSchema as { properties?: Record<string, { type?: unknown }> } | undefined)
        ?.properties;
      const t = props?.[missing]?.type;
      const expected = typeof t === 'string' ? t : 'nonoptional';
      return {
        expected,
        code: 'invalid_type',
        path: [...path, missing],
        message: `Invalid input: expected ${expected}, received undefined`,
      };
    }
    case 'additionalProperties': {
      const key = String(p['additionalProperty']);
      return {
        code: 'unrecognized_keys',
        keys: [key],
        path,
        message: `Unrecognized key: ${JSON.stringify(key)}`,
      };
    }
    case 'enum':
    case 'const': {
      const values = e.keyword === 'enum' ? (p['allowedValues'] as unknown[]) : [p['allowedValue']];
      return {
        code: 'invalid_value',
        values,
        path,
        message: `Invalid option: expected one of ${values.map((v) => JSON.stringify(v)).join('|')}`,
      };
    }
    case 'minimum':
    case 'exclusiveMinimum':
    case 'minLength':
    case 'minItems':
    case 'minProperties':
      return sizeIssue(e, path, data, true);
    case 'maximum':
    case 'exclusiveMaximum':
    case 'maxLength':
    case 'maxItems':
    case 'maxProperties':
      return sizeIssue(e, path, data, false);
    case 'pattern':
      return {
        origin: 'string',
        code: 'invalid_format',
        format: 'regex',
        pattern: p['pattern'],
        path,
        message: `Invalid string: must match pattern /${String(p['pattern'])}/`,
      };
    default:
      return { code: 'custom', path, message: e.message ?? `fails "${e.keyword}"` };
  }
}

/** Ajv's errors as zod issues; unrecognized keys of one object joined into one issue, as zod reports them. */
function zodIssues(errors: readonly ErrorObject[], input: unknown): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  const unknownKeys = new Map<string, Record<string, unknown>>();
  for (const e of errors) {
    const issue = zodIssue(e, input);
    if (issue['code'] === 'unrecognized_keys') {
      const k = JSON.stringify(issue['path']);
      const before = unknownKeys.get(k);
      if (before) {
        const keys = [...(before['keys'] as string[]), ...(issue['keys'] as string[])];
        before['keys'] = keys;
        before['message'] = `Unrecognized keys: ${keys.map((x) => JSON.stringify(x)).join(', ')}`;
        continue;
      }
      unknownKeys.set(k, issue);
    }
    if (out.length < MAX_ISSUES) out.push(issue);
  }
  // zod lists unrecognized keys after the fields' issues.
  return [
    ...out.filter((i) => i['code'] !== 'unrecognized_keys'),
    ...out.filter((i) => i['code'] === 'unrecognized_keys'),
  ];
}
