/**
 * A tenant's tools (spec §7.1): `PUT|GET|DELETE /v1/tools/:name`, one Redis hash per tenant (keys.ts `toolsKey`),
 * bounded by TENANT_MAX_TOOLS; and the provider that makes them the session's tools. A session names one in `tools`
 * like a server tool; its definition is copied into the session at create and PATCH (`ClaimedTool.copy`, kept in
 * the meta field `tenant_tools`), so a later PUT or DELETE never changes a session already using it.
 */
import type { BetaRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import type { ServerTool } from '../../tools/types.js';
import { quotaExceeded, InvalidRequest, RevisionMismatch } from '../errors.js';
import { decodeStored } from '../store/decode.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import { heavyStep } from '../tenant-turns.js';
import './lua/commands.js';
import type { ToolListing, ToolProvider } from '../toolbox.js';
import { toolsKey } from './keys.js';
import type { TaskQueue } from './tasks.js';
import type { TenantToolDef } from './types.js';

/**
 * Bytes of stored definitions decoded in one heavy step of their tenant's (tenant-turns.ts). A definition is up to
 * a 64 KiB schema and a 10,000-character description: TENANT_MAX_TOOLS (100) tools of 64 KB schemas were 7.4 MB
 * decoded in one turn of the event loop at every `GET /v1/tools`.
 */
const DECODE_STEP_BYTES = 64 * 1024;

export class TenantToolRegistry {
  constructor(
    private readonly redis: RedisClient,
    /** TENANT_MAX_TOOLS. */
    readonly maxPerTenant: number,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'tt');
  }

  /**
   * Stores `def` with the next revision, atomically (one script): created or replaced; 429 `quota_exceeded` past
   * the bound (a replace always goes); 412 `revision_mismatch` when `ifMatch` is not the stored revision (0: none).
   * The tool keeps its `created_at` (`now` for a new one); an http tool keeps its sealed secret, or takes `sealed`
   * when it has none (`secretMade`: the caller shows that secret, made in the same write, so it is the one stored).
   * `applied`: the request's Idempotency-Key token, kept with what the write did (`TenantToolDef.applied`).
   */
  async put(
    tenant: string,
    def: Omit<TenantToolDef, 'revision' | 'created_at' | 'secret' | 'applied'>,
    o: {
      now: number;
      sealed?: string | undefined;
      ifMatch?: number | undefined;
      applied?: string | undefined;
    },
  ): Promise<{ created: boolean; revision: number; createdAt: number; secretMade: boolean }> {
    const [outcome, revision, createdAt, made] = await this.redis.ttToolPut(
      toolsKey(tenant),
      def.name,
      JSON.stringify(def),
      this.maxPerTenant,
      o.ifMatch === undefined ? '' : String(o.ifMatch),
      o.now,
      o.sealed ?? '',
      o.applied ?? '',
    );
    if (outcome === -1) throw quotaExceeded('TENANT_MAX_TOOLS', this.maxPerTenant, 'tools');
    if (outcome === -2) throw new RevisionMismatch(revision, 'tool');
    return { created: outcome === 1, revision, createdAt, secretMade: made === 1 };
  }

  async get(tenant: string, name: string): Promise<TenantToolDef | null> {
    const raw = await this.redis.hget(toolsKey(tenant), name);
    return raw ? decodeStored<TenantToolDef>(raw) : null;
  }

  async getMany(tenant: string, names: readonly string[]): Promise<Map<string, TenantToolDef>> {
    const out = new Map<string, TenantToolDef>();
    if (names.length === 0) return out;
    const rows = await this.redis.hmget(toolsKey(tenant), ...names);
    rows.forEach((raw) => {
      if (raw) {
        const d = decodeStored<TenantToolDef>(raw);
        out.set(d.name, d);
      }
    });
    return out;
  }

  /**
   * Every tool of the tenant, by name: one HVALS, for `GET /v1/tools` only (a lookup by name is `get`, one HGET).
   * As bytes (ioredis would decode them all to text as the reply arrives), made text and parsed about
   * DECODE_STEP_BYTES at a time, each such step a heavy step of the tenant's (one per turn of the event loop): not
   * the whole list in one turn.
   */
  async list(tenant: string): Promise<TenantToolDef[]> {
    const all = await this.redis.hvalsBuffer(toolsKey(tenant));
    const defs: TenantToolDef[] = [];
    // Bytes decoded in the current step; a list of more than one step's worth makes each of its steps a heavy one.
    const heavy = all.reduce((n, raw) => n + raw.length, 0) > DECODE_STEP_BYTES;
    let step = 0;
    for (const raw of all) {
      if (heavy && (step === 0 || step + raw.length > DECODE_STEP_BYTES)) {
        const wait = heavyStep(tenant);
        if (wait) await wait;
        step = 0;
      }
      step += raw.length;
      defs.push(decodeStored<TenantToolDef>(raw.toString('utf8')));
    }
    return defs.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** True when it existed; 412 `revision_mismatch` when `ifMatch` is not its revision. One script. */
  async remove(tenant: string, name: string, ifMatch?: number): Promise<boolean> {
    const [outcome, revision] = await this.redis.ttToolRemove(
      toolsKey(tenant),
      name,
      ifMatch === undefined ? '' : String(ifMatch),
    );
    if (outcome === -2) throw new RevisionMismatch(revision, 'tool');
    return outcome === 1;
  }
}

/** A tenant tool's definition as it is listed and answered (never its secret). */
export function toolView(d: TenantToolDef) {
  return {
    name: d.name,
    description: d.description,
    input_schema: d.input_schema,
    runner: d.runner,
    idempotent: d.idempotent,
    read_only: d.read_only,
    timeout_ms: d.timeout_ms,
    max_attempts: d.max_attempts,
    created_at: new Date(d.created_at).toISOString(),
    updated_at: new Date(d.updated_at).toISOString(),
    revision: d.revision ?? 1,
  };
}

/**
 * The copy of a tenant tool as the runner sends it to the model. Its `run` is never called by the service's
 * runners (a call of a tenant tool ends the runner's turn and becomes a task: src/engine/tool-step.ts); should one
 * call it all the same, the call is answered with an error instead of running anywhere.
 */
function runnableCopy(d: TenantToolDef): ServerTool {
  const tool: BetaRunnableTool = {
    name: d.name,
    description: d.description,
    input_schema: { type: 'object', ...d.input_schema },
    parse: (x: unknown) => x,
    run: () => `Error: ${d.name} runs in a ${d.runner.type} runner, not in the service`,
  };
  return { tool, requiresApproval: false, idempotent: false, runner: d.runner.type };
}

/**
 * The tenant's tools as a tool source: it claims every name no provider before it claimed, so it goes last in the
 * toolbox. A name that is no tenant tool either is 400 `unknown_tool`.
 */
export function tenantToolProvider(registry: TenantToolRegistry, tasks: TaskQueue): ToolProvider {
  return {
    claims: (entry) => typeof entry === 'string',
    unknown: async (tenant, names) => {
      const found = await registry.getMany(tenant, names);
      return names.filter((n) => !found.has(n));
    },
    check: async (tenant, entries) => {
      const names = entries.filter((e): e is string => typeof e === 'string');
      const found = await registry.getMany(tenant, names);
      return names.map((n) => {
        const copy = found.get(n);
        if (!copy)
          throw new InvalidRequest(
            'unknown_tool',
            `There is no server tool or tenant tool named "${n}". GET /v1/tools lists them.`,
            { tool: n },
          );
        // Not the PUT's token (`applied`): the session's copy is the definition, nothing of the request that wrote it.
        return { name: n, from: `tenant tool "${n}"`, copy: withoutApplied(copy) };
      });
    },
    runnables: async (scope) =>
      scope.tools.flatMap((e) => {
        const d = typeof e === 'string' ? scope.tenantTools?.[e] : undefined;
        return d ? [runnableCopy(d)] : [];
      }),
    list: async (tenant) => {
      const [defs, workers] = await Promise.all([registry.list(tenant), tasks.workers(tenant)]);
      return defs.map((d) => listingOf(d, workers));
    },
    // One HGET (and the workers' read for a worker tool): a name that is not the tenant's costs no more than one
    // that is, however many tools of what size the tenant has.
    find: async (tenant, name) => {
      const d = await registry.get(tenant, name);
      if (!d) return undefined;
      return listingOf(d, d.runner.type === 'worker' ? await tasks.workers(tenant) : new Map());
    },
  };
}

const withoutApplied = ({ applied: _applied, ...def }: TenantToolDef): TenantToolDef => def;

/** A tenant tool as `GET /v1/tools` lists it. */
function listingOf(
  d: TenantToolDef,
  workers: ReadonlyMap<string, { active: number; last_seen_at: string | null }>,
): ToolListing {
  return {
    name: d.name,
    description: d.description,
    input_schema: d.input_schema,
    requires_approval: false,
    idempotent: d.idempotent,
    source: 'tenant',
    runner: d.runner,
    ...(d.runner.type === 'worker'
      ? { workers: workers.get(d.name) ?? { active: 0, last_seen_at: null } }
      : {}),
  };
}
