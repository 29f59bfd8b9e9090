/**
 * The memory tool (`"memory"` in a session's `tools`): the SDK's `betaMemoryTool()` with handlers on the tenant's
 * files in Redis (src/store/memory.ts), so every session of a tenant shares them and no other tenant sees them.
 * Commands follow the tool's contract (view, create, str_replace, insert, delete, rename); a refused path or command
 * throws, which the runner turns into an `is_error` result. Text handling is linear (indexOf, split).
 */
import { betaMemoryTool, type MemoryToolHandlers } from '@anthropic-ai/sdk/helpers/beta/memory';
import { z } from 'zod';
import type { ServerTool } from '../../tools/types.js';
import { contentVersion, type MemoryStore, type WriteOutcome } from '../store/memory.js';
import type { ToolListing, ToolProvider } from '../toolbox.js';
import { MAX_DEPTH, MAX_PATH, shownPath, toolPath } from './paths.js';

export const MEMORY_TOOL = 'memory';

/** The command's input as the model sends it (the API's `BetaMemoryTool20250818Command`), bounded. */
const text = z.string().max(16_777_216);
const path = z.string().max(1024);
export const memoryCommand = z.discriminatedUnion('command', [
  z.looseObject({
    command: z.literal('view'),
    path,
    view_range: z.tuple([z.number().int(), z.number().int()]).optional(),
  }),
  z.looseObject({ command: z.literal('create'), path, file_text: text }),
  z.looseObject({ command: z.literal('str_replace'), path, old_str: text, new_str: text }),
  z.looseObject({
    command: z.literal('insert'),
    path,
    insert_line: z.number().int().min(0),
    insert_text: text,
  }),
  z.looseObject({ command: z.literal('delete'), path }),
  z.looseObject({ command: z.literal('rename'), old_path: path, new_path: path }),
]);

/** Only `view` reads: a `view` interrupted by a crash may run again; the other commands write. */
export const memoryCallIdempotent = (input: unknown): boolean =>
  typeof input === 'object' && input !== null && 'command' in input && input.command === 'view';

const READ_MODIFY_WRITE_TRIES = 5;

function writeError(outcome: WriteOutcome, rel: string, limits: MemoryStore['limits']): Error {
  switch (outcome) {
    case 'file_too_big':
      return new Error(
        `${shownPath(rel)} would exceed ${limits.maxFileBytes} bytes, the limit of one memory file`,
      );
    case 'tenant_full':
      return new Error(
        `the memory would exceed ${limits.maxTenantBytes} bytes, the limit of all memory files`,
      );
    case 'too_many_files':
      return new Error(`the memory already has ${limits.maxFiles} files, the most it keeps`);
    case 'exists':
      return new Error(`File ${shownPath(rel)} already exists`);
    case 'not_a_directory':
      return new Error(`A directory of ${shownPath(rel)} is a file`);
    case 'is_directory':
      return new Error(`${shownPath(rel)} is a directory`);
    default:
      return new Error(`${shownPath(rel)} was changed by another session meanwhile; view it and try again`);
  }
}

/** Numbered lines as the memory tool shows a file: `     1\tfirst line`. */
function numbered(content: string, from: number, to: number): string {
  const lines = content.split('\n');
  const end = to < 0 ? lines.length : Math.min(to, lines.length);
  const out: string[] = [];
  for (let i = Math.max(1, from); i <= end; i++) out.push(`${String(i).padStart(6)}\t${lines[i - 1]}`);
  return out.join('\n');
}

/** The handlers of one tenant's memory. */
export function memoryHandlers(store: MemoryStore, tenant: string): MemoryToolHandlers {
  const limits = store.limits;
  /** A read-modify-write of one file, retried while another session changes it in between. */
  const edit = async (rel: string, change: (content: string) => string): Promise<void> => {
    for (let i = 0; i < READ_MODIFY_WRITE_TRIES; i++) {
      const content = await store.read(tenant, rel);
      if (content === null) throw new Error(`The path ${shownPath(rel)} does not exist`);
      const outcome = await store.write(tenant, rel, change(content), contentVersion(content));
      if (outcome === 'ok') return;
      if (outcome !== 'conflict') throw writeError(outcome, rel, limits);
    }
    throw writeError('conflict', rel, limits);
  };
  return {
    async view(c) {
      const rel = toolPath(c.path);
      const content = rel === '' ? null : await store.read(tenant, rel);
      if (content !== null) {
        const from = c.view_range?.[0] ?? 1;
        const to = c.view_range?.[1] ?? -1;
        return `Here's the content of ${shownPath(rel)} with line numbers:\n${numbered(content, from, to)}`;
      }
      const files = await store.list(tenant, rel);
      if (rel !== '' && files.length === 0) throw new Error(`The path ${shownPath(rel)} does not exist`);
      const lines = files.map((f) => `${f.bytes}\t${shownPath(f.path)}`);
      return `Here are the files in ${shownPath(rel)}:\n${lines.join('\n') || '(empty)'}`;
    },
    async create(c) {
      const rel = toolPath(c.path);
      if (rel === '') throw new Error(`${shownPath(rel)} is a directory`);
      // Only a new file, as the SDK's own handler (src/tools/memory/node.ts opens it 'wx'): the tenant's sessions share
      // the files, and one session's create must not silently replace what another wrote.
      const outcome = await store.write(tenant, rel, c.file_text, '!');
      if (outcome !== 'ok') throw writeError(outcome, rel, limits);
      return `File created successfully at: ${shownPath(rel)}`;
    },
    async str_replace(c) {
      const rel = toolPath(c.path);
      await edit(rel, (content) => {
        const at = c.old_str === '' ? -1 : content.indexOf(c.old_str);
        if (at < 0)
          throw new Error(
            `No replacement was performed, old_str did not appear verbatim in ${shownPath(rel)}.`,
          );
        if (content.indexOf(c.old_str, at + 1) >= 0)
          throw new Error(
            `No replacement was performed: old_str appears more than once in ${shownPath(rel)}.`,
          );
        return content.slice(0, at) + c.new_str + content.slice(at + c.old_str.length);
      });
      return 'The memory file has been edited.';
    },
    async insert(c) {
      const rel = toolPath(c.path);
      await edit(rel, (content) => {
        const lines = content.split('\n');
        if (c.insert_line > lines.length)
          throw new Error(
            `insert_line ${c.insert_line} is past the end of ${shownPath(rel)} (${lines.length} lines)`,
          );
        // One trailing line break ends the inserted text rather than adding an empty line (as the SDK's handler).
        lines.splice(c.insert_line, 0, c.insert_text.replace(/\n$/, ''));
        return lines.join('\n');
      });
      return `The file ${shownPath(rel)} has been edited.`;
    },
    async delete(c) {
      const rel = toolPath(c.path);
      if (rel === '') throw new Error(`${shownPath(rel)} itself cannot be deleted`);
      const count = await store.remove(tenant, rel);
      if (count === 0) throw new Error(`The path ${shownPath(rel)} does not exist`);
      return `Successfully deleted ${shownPath(rel)}`;
    },
    async rename(c) {
      const from = toolPath(c.old_path);
      const to = toolPath(c.new_path);
      if (from === '' || to === '') throw new Error(`${shownPath('')} itself cannot be renamed`);
      const outcome = await store.rename(tenant, from, to);
      if (outcome === 'not_found') throw new Error(`The path ${shownPath(from)} does not exist`);
      if (outcome === 'exists') throw new Error(`The destination ${shownPath(to)} already exists`);
      if (outcome === 'into_itself') throw new Error(`${shownPath(from)} cannot be moved into itself`);
      if (outcome === 'not_a_directory') throw new Error(`A directory of ${shownPath(to)} is a file`);
      if (outcome === 'too_long')
        throw new Error(
          `Moving ${shownPath(from)} to ${shownPath(to)} would give a file a path past the limits (${MAX_PATH} characters, ${MAX_DEPTH} levels)`,
        );
      return `Successfully renamed ${shownPath(from)} to ${shownPath(to)}`;
    },
  };
}

/** The memory tool of one tenant, as the runner runs it: the SDK's tool, its input checked by `memoryCommand`. */
export function memoryServerTool(store: MemoryStore, tenant: string): ServerTool {
  const tool = betaMemoryTool(memoryHandlers(store, tenant));
  return {
    // The command's shape is checked (a zod error becomes an `is_error` result); the handlers check the paths.
    tool: { ...tool, parse: (input: unknown) => memoryCommand.parse(input) },
    requiresApproval: false,
    idempotent: false,
    idempotentFor: memoryCallIdempotent,
  };
}

const listing: ToolListing = {
  name: MEMORY_TOOL,
  description:
    'The memory tool (memory_20250818): view, create, str_replace, insert, delete and rename files under /memories, kept per tenant and shared by its sessions. GET /v1/memory lists them.',
  input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  requires_approval: false,
  idempotent: false,
  source: 'memory',
};

/** `"memory"` in a session's `tools`: the memory tool of the session's tenant. */
export function memoryProvider(store: MemoryStore): ToolProvider {
  return {
    reserved: new Set([MEMORY_TOOL]),
    claims: (entry) => entry === MEMORY_TOOL,
    check: async () => [{ name: MEMORY_TOOL, from: `"${MEMORY_TOOL}"` }],
    runnables: async (scope) => [memoryServerTool(store, scope.tenant)],
    list: async () => [listing],
  };
}
