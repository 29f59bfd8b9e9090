import { appendFileSync } from 'node:fs';
import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { z } from 'zod';
import type { ServerTool } from '../../tools/types.js';

/**
 * Test-only server tools, loaded by a service started with `SERVER_TOOLS_MODULE` naming this file (tools/index.ts;
 * test/helpers/test-tools-env.ts): the durability tests need a tool that is still running when they kill a process.
 * They live under test/, so the image never holds them.
 *
 * - `sleep` waits `ms` milliseconds and is NOT idempotent: interrupted by a crash, it is answered with an `is_error`
 *   "interrupted" result instead of running again.
 * - `sleep_idempotent` does the same and is idempotent: interrupted by a crash, it runs again.
 * - `pad` answers `<label>: ` followed by filler up to `bytes` characters, at once (idempotent): long histories
 *   (the compaction tests) without long tool runs.
 *
 * With `fail: true` either throws after sleeping (the SDK answers a thrown error with an `is_error` result).
 *
 * With `TEST_TOOLS_LOG=<file>`, each run appends `start <tool_use_id> <pid>` and `end <tool_use_id> <pid>` lines to
 * that file, so a test can count how often a call ran, across processes. Both honour the run's abort signal.
 */

const input = z.object({
  ms: z.number().int().min(0).max(60_000).describe('How long to sleep, in milliseconds'),
  label: z.string().max(200).optional().describe('Echoed in the result'),
  fail: z.boolean().optional().describe('Throw after sleeping (a tool that fails)'),
});

function note(what: 'start' | 'end', id: string | undefined): void {
  const file = process.env['TEST_TOOLS_LOG'];
  if (file) appendFileSync(file, `${what} ${id ?? '?'} ${process.pid}\n`);
}

function sleepTool(name: string, idempotent: boolean): ServerTool {
  return {
    tool: betaZodTool({
      name,
      description: `TEST ONLY: wait for \`ms\` milliseconds, then answer "slept <ms> ms". ${idempotent ? 'Idempotent.' : 'Not idempotent.'}`,
      inputSchema: input,
      run: async ({ ms, label, fail }, ctx?: any) => {
        const id: string | undefined = ctx?.toolUse?.id;
        const signal: AbortSignal | undefined = ctx?.signal;
        note('start', id);
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(resolve, ms);
          signal?.addEventListener(
            'abort',
            () => {
              clearTimeout(timer);
              reject(new Error('aborted'));
            },
            { once: true },
          );
        });
        note('end', id);
        if (fail) throw new Error(`failed on purpose after ${ms} ms`);
        return `slept ${ms} ms${label ? ` (${label})` : ''}`;
      },
    }),
    requiresApproval: false,
    idempotent,
  };
}

const padTool: ServerTool = {
  tool: betaZodTool({
    name: 'pad',
    description: 'TEST ONLY: answer "<label>: " and filler, `bytes` characters in all.',
    inputSchema: z.object({
      bytes: z.number().int().min(0).max(100_000),
      label: z.string().max(200).default('pad'),
    }),
    run: ({ bytes, label }) => {
      const head = `${label}: `;
      return head + '.'.repeat(Math.max(0, bytes - head.length));
    },
  }),
  requiresApproval: false,
  idempotent: true,
};

/** The test-only tools: this module's default export, as SERVER_TOOLS_MODULE expects. */
const testingTools: readonly ServerTool[] = [
  sleepTool('sleep', false),
  sleepTool('sleep_idempotent', true),
  padTool,
];
export default testingTools;
