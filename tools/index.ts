import calculateSum from './calculate_sum.js';
import currentTime from './current_time.js';
import evaluateExpression from './evaluate_expression.js';
import getWeather from './get_weather.js';
import { pathToFileURL } from 'node:url';
import type { ServerTool } from './types.js';

export type { ServerTool } from './types.js';

/** What `GET /v1/tools` lists for each server tool. */
export interface ToolSchema {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
  requires_approval: boolean;
  idempotent: boolean;
}

function nameOf(serverTool: ServerTool): string {
  const { tool } = serverTool;
  if (!('name' in tool) || typeof tool.name !== 'string') throw new Error('A server tool must have a name');
  return tool.name;
}

/**
 * The operator's own in-process server tools: `SERVER_TOOLS_MODULE` names a module (a path, or a file: URL) whose
 * default export is an array of `ServerTool`s (tools/types.ts). Read once, when this module loads; a module that
 * fails to load or exports something else stops the boot. The tests load test/tools/testing.ts this way.
 */
async function extraTools(specifier: string | undefined): Promise<readonly ServerTool[]> {
  if (!specifier) return [];
  const url = specifier.startsWith('file:') ? specifier : pathToFileURL(specifier).href;
  const loaded: unknown = ((await import(url)) as { default?: unknown }).default;
  if (!Array.isArray(loaded) || !loaded.every(isServerTool)) {
    throw new Error(`SERVER_TOOLS_MODULE=${specifier}: its default export must be an array of server tools`);
  }
  return loaded;
}

function isServerTool(value: unknown): value is ServerTool {
  return typeof value === 'object' && value !== null && 'tool' in value && 'requiresApproval' in value;
}

const all: readonly ServerTool[] = [
  getWeather,
  calculateSum,
  evaluateExpression,
  currentTime,
  ...(await extraTools(process.env['SERVER_TOOLS_MODULE'])),
];

function byName(tools: readonly ServerTool[]): Map<string, ServerTool> {
  const map = new Map<string, ServerTool>();
  for (const t of tools) {
    const name = nameOf(t);
    if (map.has(name)) throw new Error(`Duplicate server tool name: ${name}`);
    map.set(name, t);
  }
  return map;
}

/** The tools the service runs itself, by the name the model calls them by. */
export const serverTools: ReadonlyMap<string, ServerTool> = byName(all);

/** What `GET /v1/tools` lists for one server tool. */
export function toolSchema(name: string, { tool, requiresApproval, idempotent }: ServerTool): ToolSchema {
  return {
    name,
    description: 'description' in tool && typeof tool.description === 'string' ? tool.description : '',
    input_schema:
      'input_schema' in tool && typeof tool.input_schema === 'object' && tool.input_schema !== null
        ? tool.input_schema
        : { type: 'object' },
    requires_approval: requiresApproval,
    idempotent,
  };
}

/** The server tools' definitions, for `GET /v1/tools`. */
export function toolSchemas(tools: ReadonlyMap<string, ServerTool> = serverTools): ToolSchema[] {
  return [...tools].map(([name, t]) => toolSchema(name, t));
}
