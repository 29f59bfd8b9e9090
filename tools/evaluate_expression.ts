/**
 * The evaluate_expression server tool: a small arithmetic parser (tokenizer, precedence climbing, bounded depth and
 * length) written out rather than `eval`, which is why it is one file over 400 lines: the grammar reads top to bottom.
 */
import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { z } from 'zod';
import type { ServerTool } from './types.js';

/**
 * A safe arithmetic evaluator: a tokenizer plus a recursive-descent parser that evaluates as it parses. No `eval`,
 * no `Function`, no property access: identifiers are looked up in two fixed `Map`s (constants and functions), so
 * names like `constructor` or `__proto__` are simply unknown.
 *
 * Grammar (lowest to highest precedence):
 *
 *   expression := additive
 *   additive   := term (('+' | '-') term)*
 *   term       := unary (('*' | '/' | '%') unary)*
 *   unary      := ('+' | '-') unary | power
 *   power      := primary ('^' unary)?          right-associative; -2^2 = -(2^2), 2^-1 = 0.5
 *   primary    := NUMBER | CONSTANT | FUNCTION '(' expression (',' expression)* ')' | '(' expression ')'
 *
 * Positions in error messages are 1-based character columns of the input.
 */

export const MAX_EXPRESSION_LENGTH = 1000;
export const MAX_NESTING_DEPTH = 64;

export class ExpressionError extends Error {
  /** 1-based character column the error refers to. */
  readonly position: number;
  constructor(message: string, position: number) {
    super(`${message} at position ${position}`);
    this.name = 'ExpressionError';
    this.position = position;
  }
}

type TokenKind = 'number' | 'identifier' | 'operator' | 'lparen' | 'rparen' | 'comma' | 'end';

interface Token {
  kind: TokenKind;
  text: string;
  /** 0-based offset into the input. */
  start: number;
  value?: number;
}

const NUMBER_RE = /(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?/y;
const IDENTIFIER_RE = /[A-Za-z_][A-Za-z0-9_]*/y;
const OPERATORS = new Set(['+', '-', '*', '/', '%', '^']);

function tokenize(input: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < input.length) {
    const ch = input.charAt(i);
    if (/\s/.test(ch)) {
      i += 1;
      continue;
    }
    NUMBER_RE.lastIndex = i;
    const num = NUMBER_RE.exec(input);
    if (num) {
      const text = num[0];
      tokens.push({ kind: 'number', text, start: i, value: Number(text) });
      i += text.length;
      continue;
    }
    IDENTIFIER_RE.lastIndex = i;
    const ident = IDENTIFIER_RE.exec(input);
    if (ident) {
      tokens.push({ kind: 'identifier', text: ident[0], start: i });
      i += ident[0].length;
      continue;
    }
    if (OPERATORS.has(ch)) {
      tokens.push({ kind: 'operator', text: ch, start: i });
    } else if (ch === '(') {
      tokens.push({ kind: 'lparen', text: ch, start: i });
    } else if (ch === ')') {
      tokens.push({ kind: 'rparen', text: ch, start: i });
    } else if (ch === ',') {
      tokens.push({ kind: 'comma', text: ch, start: i });
    } else {
      const shown = JSON.stringify(String.fromCodePoint(input.codePointAt(i) ?? 0));
      throw new ExpressionError(`Unexpected character ${shown}`, i + 1);
    }
    i += 1;
  }
  tokens.push({ kind: 'end', text: '', start: input.length });
  return tokens;
}

const CONSTANTS: ReadonlyMap<string, number> = new Map([
  ['pi', Math.PI],
  ['e', Math.E],
]);

interface FunctionSpec {
  minArgs: number;
  maxArgs: number;
  apply: (args: number[], position: number) => number;
}

function arg(args: number[], index: number): number {
  const value = args[index];
  if (value === undefined) throw new Error(`internal: missing argument ${index}`);
  return value;
}

function unary(fn: (x: number) => number): FunctionSpec {
  return { minArgs: 1, maxArgs: 1, apply: (args) => fn(arg(args, 0)) };
}

const FUNCTIONS: ReadonlyMap<string, FunctionSpec> = new Map<string, FunctionSpec>([
  [
    'sqrt',
    {
      minArgs: 1,
      maxArgs: 1,
      apply: (args, position) => {
        const x = arg(args, 0);
        if (x < 0) throw new ExpressionError('sqrt of a negative number', position);
        return Math.sqrt(x);
      },
    },
  ],
  ['abs', unary(Math.abs)],
  ['min', { minArgs: 1, maxArgs: Infinity, apply: (args) => Math.min(...args) }],
  ['max', { minArgs: 1, maxArgs: Infinity, apply: (args) => Math.max(...args) }],
  [
    'round',
    {
      minArgs: 1,
      maxArgs: 2,
      apply: (args, position) => {
        const x = arg(args, 0);
        const digits = args[1] ?? 0;
        if (!Number.isInteger(digits) || digits < 0 || digits > 15) {
          throw new ExpressionError('round: digits must be an integer from 0 to 15', position);
        }
        const factor = 10 ** digits;
        // Round half away from zero (Math.round rounds -2.5 to -2).
        return (Math.sign(x) * Math.round(Math.abs(x) * factor)) / factor;
      },
    },
  ],
  ['floor', unary(Math.floor)],
  ['ceil', unary(Math.ceil)],
  [
    'log',
    {
      minArgs: 1,
      maxArgs: 2,
      apply: (args, position) => {
        const x = arg(args, 0);
        if (x <= 0) throw new ExpressionError('log of a non-positive number', position);
        const base = args[1];
        if (base === undefined) return Math.log10(x);
        if (base <= 0 || base === 1)
          throw new ExpressionError('log: base must be positive and not 1', position);
        return Math.log(x) / Math.log(base);
      },
    },
  ],
  [
    'ln',
    {
      minArgs: 1,
      maxArgs: 1,
      apply: (args, position) => {
        const x = arg(args, 0);
        if (x <= 0) throw new ExpressionError('ln of a non-positive number', position);
        return Math.log(x);
      },
    },
  ],
  ['sin', unary(Math.sin)],
  ['cos', unary(Math.cos)],
  ['tan', unary(Math.tan)],
]);

class Parser {
  private readonly tokens: Token[];
  private index = 0;
  private depth = 0;

  constructor(tokens: Token[]) {
    this.tokens = tokens;
  }

  private peek(): Token {
    const token = this.tokens[this.index];
    if (!token) throw new Error('internal: read past the end token');
    return token;
  }

  private next(): Token {
    const token = this.peek();
    if (token.kind !== 'end') this.index += 1;
    return token;
  }

  private enter(position: number): void {
    this.depth += 1;
    if (this.depth > MAX_NESTING_DEPTH) {
      throw new ExpressionError(
        `Expression is nested too deeply (more than ${MAX_NESTING_DEPTH} levels)`,
        position,
      );
    }
  }

  private leave(): void {
    this.depth -= 1;
  }

  parse(): number {
    if (this.peek().kind === 'end') throw new ExpressionError('Empty expression', 1);
    const value = this.expression();
    const rest = this.peek();
    if (rest.kind !== 'end') {
      throw new ExpressionError(`Unexpected ${describe(rest)}`, rest.start + 1);
    }
    return value;
  }

  private expression(): number {
    let left = this.term();
    while (true) {
      const op = this.peek();
      if (op.kind !== 'operator' || (op.text !== '+' && op.text !== '-')) return left;
      this.next();
      const right = this.term();
      left = finite(op.text === '+' ? left + right : left - right, op);
    }
  }

  private term(): number {
    let left = this.unary();
    while (true) {
      const op = this.peek();
      if (op.kind !== 'operator' || (op.text !== '*' && op.text !== '/' && op.text !== '%')) return left;
      this.next();
      const right = this.unary();
      if (op.text === '*') {
        left = finite(left * right, op);
      } else {
        if (right === 0) {
          throw new ExpressionError(op.text === '/' ? 'Division by zero' : 'Modulo by zero', op.start + 1);
        }
        left = finite(op.text === '/' ? left / right : left % right, op);
      }
    }
  }

  private unary(): number {
    const op = this.peek();
    if (op.kind === 'operator' && (op.text === '-' || op.text === '+')) {
      this.next();
      this.enter(op.start + 1);
      const operand = this.unary();
      this.leave();
      return op.text === '-' ? -operand : operand;
    }
    return this.power();
  }

  private power(): number {
    const base = this.primary();
    const op = this.peek();
    if (op.kind !== 'operator' || op.text !== '^') return base;
    this.next();
    this.enter(op.start + 1);
    const exponent = this.unary();
    this.leave();
    return finite(base ** exponent, op);
  }

  private primary(): number {
    const token = this.next();
    switch (token.kind) {
      case 'number': {
        const value = token.value ?? Number.NaN;
        if (!Number.isFinite(value))
          throw new ExpressionError(`Number '${token.text}' is too large`, token.start + 1);
        return value;
      }
      case 'lparen': {
        this.enter(token.start + 1);
        const value = this.expression();
        this.expect('rparen', "')'", token);
        this.leave();
        return value;
      }
      case 'identifier':
        return this.identifier(token);
      default:
        throw new ExpressionError(
          token.kind === 'end' ? 'Unexpected end of expression' : `Unexpected ${describe(token)}`,
          token.start + 1,
        );
    }
  }

  private identifier(token: Token): number {
    const name = token.text.toLowerCase();
    const constant = CONSTANTS.get(name);
    const fn = FUNCTIONS.get(name);
    if (constant !== undefined) {
      if (this.peek().kind === 'lparen') {
        throw new ExpressionError(`'${token.text}' is a constant, not a function`, token.start + 1);
      }
      return constant;
    }
    if (fn === undefined) {
      throw new ExpressionError(
        `Unknown identifier '${token.text}' (known: ${[...CONSTANTS.keys(), ...FUNCTIONS.keys()].join(', ')})`,
        token.start + 1,
      );
    }
    const open = this.peek();
    if (open.kind !== 'lparen') {
      throw new ExpressionError(`Function '${token.text}' must be followed by '('`, open.start + 1);
    }
    this.next();
    this.enter(open.start + 1);
    const args: number[] = [];
    if (this.peek().kind !== 'rparen') {
      args.push(this.expression());
      while (this.peek().kind === 'comma') {
        this.next();
        args.push(this.expression());
      }
    }
    this.expect('rparen', "')' or ','", open);
    this.leave();
    if (args.length < fn.minArgs || args.length > fn.maxArgs) {
      const expected =
        fn.maxArgs === Infinity
          ? `at least ${fn.minArgs}`
          : fn.minArgs === fn.maxArgs
            ? `${fn.minArgs}`
            : `${fn.minArgs} or ${fn.maxArgs}`;
      throw new ExpressionError(
        `Function '${name}' takes ${expected} argument(s), got ${args.length}`,
        token.start + 1,
      );
    }
    return finite(fn.apply(args, token.start + 1), token);
  }

  private expect(kind: TokenKind, what: string, opener: Token): void {
    const token = this.peek();
    if (token.kind !== kind) {
      const found = token.kind === 'end' ? 'end of expression' : describe(token);
      throw new ExpressionError(
        `Expected ${what} to close '(' at position ${opener.start + 1}, found ${found}`,
        token.start + 1,
      );
    }
    this.next();
  }
}

function describe(token: Token): string {
  switch (token.kind) {
    case 'number':
      return `number '${token.text}'`;
    case 'identifier':
      return `identifier '${token.text}'`;
    case 'end':
      return 'end of expression';
    default:
      return `'${token.text}'`;
  }
}

function finite(value: number, at: Token): number {
  if (!Number.isFinite(value)) {
    throw new ExpressionError(
      Number.isNaN(value) ? 'Result is not a number' : 'Result is too large (overflow)',
      at.start + 1,
    );
  }
  return value;
}

/** Evaluates an arithmetic expression. Throws an {@link ExpressionError} (with a position) on any problem. */
export function evaluateExpression(expression: string): number {
  if (expression.length > MAX_EXPRESSION_LENGTH) {
    throw new ExpressionError(
      `Expression is too long (${expression.length} characters, at most ${MAX_EXPRESSION_LENGTH})`,
      MAX_EXPRESSION_LENGTH + 1,
    );
  }
  return new Parser(tokenize(expression)).parse();
}

/**
 * A result as text: rounded to 15 significant digits so binary floating-point noise (0.1 + 0.2) does not show, and
 * without a negative zero.
 */
export function formatResult(value: number): string {
  if (!Number.isFinite(value)) throw new Error('Result is not a finite number');
  const rounded = Number(value.toPrecision(15));
  return String(rounded === 0 ? 0 : rounded);
}

const evaluateExpressionTool: ServerTool = {
  tool: betaZodTool({
    name: 'evaluate_expression',
    description:
      'Evaluate an arithmetic expression and return the result as text. Supports numbers (decimals and exponent ' +
      'notation like 1.5e3), + - * / % and ^ (power, right-associative), unary minus/plus, parentheses, the ' +
      'constants pi and e, and the functions sqrt, abs, min, max, round(x[, digits]), floor, ceil, log(x[, base]) ' +
      '(base 10 by default), ln, sin, cos, tan (radians). Errors name the position of the problem.',
    inputSchema: z.object({
      expression: z
        .string()
        .describe(
          `The arithmetic expression, at most ${MAX_EXPRESSION_LENGTH} characters, e.g. "2 * (3 + 4)^2"`,
        ),
    }),
    run: ({ expression }) => formatResult(evaluateExpression(expression)),
  }),
  requiresApproval: false,
  idempotent: true,
};

export default evaluateExpressionTool;
