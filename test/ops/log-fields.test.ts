/**
 * One name per thing in logs: every log call (and child logger) in src/ and routes/ names a session `session`, a
 * tenant `tenant`, a tool `tool`, a tool_use id `tool_use_id`, a webhook `webhook` and an error `err` (src/log.ts),
 * never another spelling. Read from the source with the TypeScript parser, so a new call with `sessionId` fails here.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LOG_METHODS = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'child']);
/** Other spellings, and the name to use instead. */
const RENAMED: Record<string, string> = {
  sessionId: 'session',
  session_id: 'session',
  sessionID: 'session',
  tenantId: 'tenant',
  tenant_id: 'tenant',
  toolName: 'tool',
  tool_name: 'tool',
  toolUseId: 'tool_use_id',
  toolUseID: 'tool_use_id',
  webhookId: 'webhook',
  webhook_id: 'webhook',
  error: 'err',
  e: 'err',
};

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(file);
    return file.endsWith('.ts') ? [file] : [];
  });
}

/** `file:line key (use name)` for every log call whose first argument names a field another way. */
function misnamedFields(file: string): string[] {
  const source = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      LOG_METHODS.has(node.expression.name.text) &&
      node.arguments[0] &&
      ts.isObjectLiteralExpression(node.arguments[0])
    ) {
      for (const property of node.arguments[0].properties) {
        const name =
          property.name && (ts.isIdentifier(property.name) || ts.isStringLiteral(property.name))
            ? property.name.text
            : undefined;
        if (name !== undefined && RENAMED[name]) {
          const { line } = source.getLineAndCharacterOfPosition(property.getStart());
          found.push(`${path.relative(ROOT, file)}:${line + 1} ${name} (use ${RENAMED[name]})`);
        }
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

test('log calls in src/ and routes/ use one name per thing', () => {
  const files = [...sourceFiles(path.join(ROOT, 'src')), ...sourceFiles(path.join(ROOT, 'routes'))];
  assert.ok(files.length > 20, 'the sources are found');
  assert.deepEqual(files.flatMap(misnamedFields), []);
});

test('the check sees a misnamed field', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'log-fields-'));
  try {
    const file = path.join(dir, 'sample.ts');
    fs.writeFileSync(file, "log.warn({ sessionId: id, err }, 'x');\nlog.child({ component: 'engine' });\n");
    assert.deepEqual(
      misnamedFields(file).map((line) => line.split(' ').slice(1).join(' ')),
      ['sessionId (use session)'],
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
