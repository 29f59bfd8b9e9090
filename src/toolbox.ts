/**
 * The tools the service runs itself, from every source: the server tools of `tools/`, the tools of MCP servers
 * (`src/mcp/`), and whatever else is added as a provider (the memory tool). A session's `tools` entries are checked
 * against the providers at create (and PATCH), resolved to runnable tools at the start of each run, and listed by
 * `GET /v1/tools`. Client tools (`{name, description, input_schema}`) are the client's: no provider runs them.
 */
import type { BetaRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import { toolSchemas } from '../tools/index.js';
import type { ServerTool } from '../tools/types.js';
import { validationProblem } from './engine/client-validation.js';
import { badRequest, InvalidRequest } from './errors.js';
import type { ToolRef } from './store/session-state.js';
import { isMcpToolset, mcpToolsetKey } from './mcp/schema.js';
import { isAnthropicTool } from './tools/anthropic-tools.js';
import type { TenantToolDef, TenantToolRunner } from './tenant-tools/types.js';

/** One tool as `GET /v1/tools` lists it. */
export interface ToolListing {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
  requires_approval: boolean;
  idempotent: boolean;
  /** Where the tool comes from: `server` (tools/), `mcp` (an MCP server of MCP_SERVERS), `memory`, `tenant`. */
  source: 'server' | 'mcp' | 'memory' | 'tenant';
  /** A tenant tool's runner. */
  runner?: TenantToolRunner;
  /** A worker tool's workers: how many claimed or heartbeated within two leases, and when one was last seen. */
  workers?: { active: number; last_seen_at: string | null };
  /** The MCP server, for `source: "mcp"`. */
  mcp_server?: string;
  /** The MCP server's annotations of the tool (`readOnlyHint`, `idempotentHint`, `destructiveHint`, …). */
  annotations?: Record<string, unknown>;
}

/** A session's tools as a provider sees them. */
export interface ToolScope {
  tenant: string;
  session: string;
  tools: readonly ToolRef[];
  /** The session's copies of the tenant tools it names (src/tenant-tools/registry.ts). */
  tenantTools?: Readonly<Record<string, TenantToolDef>>;
}

/** A tool brought by an entry, for the name checks at create. */
export interface ClaimedTool {
  name: string;
  /** The entry that brought it, for messages: `"get_weather"`, `mcp_server "files"`. */
  from: string;
  /** A tenant tool's definition, copied into the session. */
  copy?: TenantToolDef;
}

/** One source of tools the service runs. */
export interface ToolProvider {
  /** Whether this provider owns the `tools` entry. */
  claims(entry: ToolRef): boolean;
  /**
   * Checks the entries it claims at create (or PATCH) for `tenant` (throws an InvalidRequest) and returns the tools
   * they bring, as far as it knows them now.
   */
  check(tenant: string, entries: readonly ToolRef[]): Promise<ClaimedTool[]>;
  /**
   * The session's tools of this provider, as the runner runs them. Never throws: a source that cannot be reached
   * brings fewer tools (a call to a missing tool is answered "not found" by the runner).
   */
  runnables(scope: ToolScope): Promise<ServerTool[]>;
  /** What `GET /v1/tools` lists of this provider for `tenant`. */
  list(tenant: string): Promise<ToolListing[]>;
  /**
   * The entry `list(tenant)` has for `name` (the first if it has two), read by name: a provider whose list is costly
   * (the tenant's registry: every definition read and decoded) answers a lookup with a read of that name alone. A
   * provider without it is asked for its list.
   */
  find?(tenant: string, name: string): Promise<ToolListing | undefined>;
  /** Names a client tool may never take, whether the session uses the tool or not (the server tools' names). */
  reserved?: ReadonlySet<string>;
  /**
   * Of bare names it claims, those it does not know for `tenant` now, in one read for all (a provider without it
   * claims only names it knows).
   */
  unknown?(tenant: string, names: readonly string[]): Promise<string[]>;
}

/** The name a runnable tool is called by. */
export function runnableName(tool: BetaRunnableTool): string {
  return 'name' in tool && typeof tool.name === 'string' ? tool.name : '';
}

/** TOOL_RESULT_MAX_BYTES's default: most bytes of one tool result the service produces. */
const DEFAULT_RESULT_MAX_BYTES = 1_048_576;

/** The providers, asked in order. */
export class Toolbox {
  constructor(
    private readonly providers: readonly ToolProvider[],
    /** TOOL_RESULT_MAX_BYTES: a larger result of any tool the service runs becomes an `is_error` naming it. */
    readonly resultMaxBytes = DEFAULT_RESULT_MAX_BYTES,
  ) {}

  /**
   * Checks a session's `tools` at create: every entry is claimed by a provider or is a client tool, and no name is
   * brought twice (400 `duplicate_tool` for the same entry given twice, `tool_name_conflict` across entries).
   * Returns the copies of the tenant tools it names, by name.
   */
  async check(tenant: string, tools: readonly ToolRef[]): Promise<Record<string, TenantToolDef>> {
    const seen = new Map<string, string>();
    const add = (t: ClaimedTool) => {
      const before = seen.get(t.name);
      if (before === undefined) {
        seen.set(t.name, t.from);
        return;
      }
      if (before === t.from)
        throw new InvalidRequest('duplicate_tool', `The tool "${t.name}" is given twice.`, { tool: t.name });
      throw new InvalidRequest(
        'tool_name_conflict',
        `Two tools of the session are named "${t.name}" (${before} and ${t.from}); name the client tool otherwise or leave one out (allowed_tools).`,
        { tool: t.name, sources: [before, t.from] },
      );
    };
    const claimed = new Map<ToolProvider, ToolRef[]>();
    for (const t of tools) {
      const p = this.providers.find((x) => x.claims(t));
      if (p) claimed.set(p, [...(claimed.get(p) ?? []), t]);
      else if (isMcpToolset(t)) {
        // Anthropic's MCP connector: the API runs these tools; one entry per server of `params.mcp_servers`.
        add({ name: mcpToolsetKey(t.mcp_server_name), from: `mcp_toolset "${t.mcp_server_name}"` });
      } else if (typeof t === 'object' && ('input_schema' in t || isAnthropicTool(t))) {
        // A client tool, or an Anthropic-defined tool (run upstream or by a client): a name of the session all the same.
        if (this.providers.some((p) => p.reserved?.has(t.name)))
          throw new InvalidRequest(
            'tool_name_conflict',
            `"${t.name}" is the name of a server tool; name the client tool otherwise.`,
            { tool: t.name },
          );
        add({ name: t.name, from: 'a client tool' });
        const problem =
          !isAnthropicTool(t) && t.validate === true ? validationProblem(tenant, t.input_schema) : null;
        if (problem)
          throw badRequest(
            `The input_schema of "${t.name}" cannot validate inputs (validate: true): ${problem}.`,
            {
              tool: t.name,
            },
          );
      } else if (typeof t === 'string')
        throw new InvalidRequest(
          'unknown_tool',
          `There is no server tool named "${t}". GET /v1/tools lists them.`,
          {
            tool: t,
          },
        );
      else throw new InvalidRequest('unknown_tool', 'A tools entry of an unknown form.');
    }
    // Provider tools first, so a client tool that takes one of their names is the one reported.
    const lists = await Promise.all([...claimed].map(([p, entries]) => p.check(tenant, entries)));
    const provided = lists.flat();
    const client = [...seen];
    seen.clear();
    for (const t of provided) add(t);
    for (const [name, from] of client) add({ name, from });
    return Object.fromEntries(provided.flatMap((t) => (t.copy ? [[t.name, t.copy]] : [])));
  }

  /** Of `names` (bare `tools` entries), those no tool source knows for `tenant` now: one read per source. */
  async unknownNames(tenant: string, names: readonly string[]): Promise<Set<string>> {
    const out = new Set<string>();
    const claimed = new Map<ToolProvider, string[]>();
    for (const n of new Set(names)) {
      const p = this.providers.find((x) => x.claims(n));
      if (!p) out.add(n);
      else if (p.unknown) claimed.set(p, [...(claimed.get(p) ?? []), n]);
    }
    const lists = await Promise.all([...claimed].map(([p, ns]) => p.unknown?.(tenant, ns) ?? []));
    for (const n of lists.flat()) out.add(n);
    return out;
  }

  /** Names a tenant tool may not take: the server tools' (and the memory tool's). */
  reservedNames(): Set<string> {
    return new Set(this.providers.flatMap((p) => [...(p.reserved ?? [])]));
  }

  /** The session's runnable tools by name; a name brought twice keeps its first provider's tool. */
  async forSession(scope: ToolScope): Promise<Map<string, ServerTool>> {
    const lists = await Promise.all(
      this.providers.map((p) => (scope.tools.some((t) => p.claims(t)) ? p.runnables(scope) : [])),
    );
    // A clash the create check could not see (an MCP server that did not answer then) keeps the client tool (or the
    // Anthropic-defined one): the request never carries two tools of one name.
    const client = new Set(
      scope.tools.flatMap((t) =>
        typeof t === 'object' && ('input_schema' in t || isAnthropicTool(t)) ? [t.name] : [],
      ),
    );
    const out = new Map<string, ServerTool>();
    for (const t of lists.flat()) {
      const name = runnableName(t.tool);
      if (name && !out.has(name) && !client.has(name)) out.set(name, t);
    }
    return out;
  }

  /**
   * `GET /v1/tools`: every provider's tools for `tenant`, in the providers' order. The lists of providers with `find`
   * (costly: the tenant's registry) are made once `costly` resolves true, after the others (which may wait for an
   * MCP server): the route takes its tenant's place in the line of heavy reads there, not while it waits on a server.
   * Null when `costly` resolves false (the client went away).
   */
  async list(tenant: string, costly: () => Promise<boolean>): Promise<ToolListing[] | null> {
    const cheap = await Promise.all(this.providers.map((p) => (p.find ? null : p.list(tenant))));
    if (!(await costly())) return null;
    return (await Promise.all(this.providers.map((p, i) => cheap[i] ?? p.list(tenant)))).flat();
  }

  /**
   * `GET /v1/tools/:name` of a tool that is not the tenant's: the entry `GET /v1/tools` lists for `name` (the first
   * if two sources list it, as two MCP servers may), or undefined. The sources are asked in the list's order and the
   * first that lists the name answers, so a server tool's or the memory tool's name never reaches an MCP server. An
   * MCP server that does not answer counts as the list counts it: with its last known tools, or none (so its tool is
   * 404 there, never a 5xx; an unknown name waits for such a server as `GET /v1/tools` does, up to
   * MCP_CONNECT_TIMEOUT_MS, and concurrent lookups share one attempt). A source that can read one name (`find`:
   * the tenant's registry, one HGET) is asked for that name only: a lookup never reads every tenant tool.
   */
  async listed(tenant: string, name: string): Promise<ToolListing | undefined> {
    for (const p of this.providers) {
      const hit = p.find ? await p.find(tenant, name) : (await p.list(tenant)).find((t) => t.name === name);
      if (hit) return hit;
    }
    return undefined;
  }
}

/** The server tools of `tools/`: a `tools` entry that is one's name. */
export function serverToolProvider(serverTools: ReadonlyMap<string, ServerTool>): ToolProvider {
  const listing: ToolListing[] = toolSchemas(serverTools).map((t) => ({ ...t, source: 'server' }));
  return {
    reserved: new Set(serverTools.keys()),
    claims: (entry) => typeof entry === 'string' && serverTools.has(entry),
    check: async (_tenant, entries) =>
      entries.flatMap((e) => (typeof e === 'string' ? [{ name: e, from: `"${e}"` }] : [])),
    runnables: async (scope) =>
      scope.tools.flatMap((e) => {
        const t = typeof e === 'string' ? serverTools.get(e) : undefined;
        return t ? [t] : [];
      }),
    list: async () => listing,
  };
}
