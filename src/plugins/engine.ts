import fp from 'fastify-plugin';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { serverTools } from '../../tools/index.js';
import { Engine } from '../engine/engine.js';
import type { SessionDeps } from '../sessions/mutate.js';
import { DeadlineSweeper } from '../sessions/deadlines.js';
import { RetentionSweeper } from '../sessions/retention.js';
import { SessionChannels } from '../store/channels.js';
import { SessionStore, type StoreOptions } from '../store/store.js';
import { componentLog } from '../log.js';
import { serverToolProvider, Toolbox } from '../toolbox.js';
import { memoryProvider } from '../memory/tool.js';
import { MemoryStore, type MemoryLimits } from '../store/memory.js';
import { TenantToolRegistry, tenantToolProvider } from '../tenant-tools/registry.js';
import { HttpToolCaller } from '../tenant-tools/http-caller.js';
import { ToolTasks } from '../tenant-tools/service.js';
import { TaskQueue } from '../tenant-tools/tasks.js';
import { GcPolicy, IdleTrim, startGrowingPercent } from '../gc-policy.js';

declare module 'fastify' {
  interface FastifyInstance {
    store: SessionStore;
    /** The sessions' pub/sub channels on the subscriber connection (events notices, run control). */
    channels: SessionChannels;
    engine: Engine;
    /** Every source of tools the service runs: server tools, MCP servers, … (`GET /v1/tools`, session checks). */
    toolbox: Toolbox;
    /**
     * What the operations on sessions (src/sessions/*.ts) need: the routes, the WebSocket frames and the sweeps call
     * them with it.
     */
    sessionDeps: SessionDeps;
    /** The memory tool's files, per tenant (`routes/memory.ts`). */
    memory: MemoryStore;
    /** The tenants' own tools (`routes/tenant-tools.ts`). */
    tenantTools: TenantToolRegistry;
    /** Their calls as tool tasks (`routes/tool-tasks.ts`). */
    toolTasks: ToolTasks;
  }
}

export interface EnginePluginOptions {
  leaseTtlMs: number;
  store: StoreOptions;
  shutdownGraceMs: number;
  maxActiveRuns: number;
  /** Caps of the memory tool's files (MEMORY_MAX_*). */
  memory: MemoryLimits;
  /** TOOL_RESULT_MAX_BYTES: most bytes of one tool result the service produces. */
  toolResultMaxBytes?: number;
  /**
   * Tenant tools and tool tasks (TOOL_TASK_LEASE_MS, TENANT_MAX_TOOLS, TOOL_TASKS_MAX_PER_TENANT,
   * TOOL_RESULT_MAX_BYTES, TOOL_TASK_MAX_WAITING_CLAIMS, TOOL_TASK_CLAIM_MAX_BYTES).
   */
  tenantTools: {
    leaseMs: number;
    maxTools: number;
    maxTasks: number;
    claimMaxBytes?: number;
    maxResultBytes: number;
    maxWaitingClaims?: number;
  };
  /** How often this replica sweeps the action deadlines and the sessions' expiry (DEADLINE_SWEEP_MS). */
  deadlineSweepMs?: number;
}

/**
 * The store (its commands and its channels), the run engine and the session service, on the shared clients. Runs
 * stop first on close.
 */
export default fp<EnginePluginOptions>(
  async (app, opts) => {
    const store = new SessionStore(app.redis, opts.store);
    // Asked in order: a name is the first provider's.
    const memory = new MemoryStore(app.redis, opts.memory);
    const tt = opts.tenantTools;
    const registry = new TenantToolRegistry(app.redis, tt.maxTools);
    const tasks = new TaskQueue(app.redis, tt.leaseMs, tt.maxTasks, tt.claimMaxBytes);
    const toolbox = new Toolbox(
      [
        serverToolProvider(serverTools),
        memoryProvider(memory),
        app.mcp,
        // Last: it claims every name the others did not.
        tenantToolProvider(registry, tasks),
      ],
      opts.toolResultMaxBytes,
    );
    const channels = new SessionChannels(app.redisSub);
    const engine = new Engine({
      store,
      channels,
      client: app.anthropic,
      serverTools,
      toolbox,
      logger: componentLog(app.log, 'engine'),
      owner: `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`,
      leaseTtlMs: opts.leaseTtlMs,
      maxActiveRuns: opts.maxActiveRuns,
      metrics: app.metrics,
      tracing: app.tracing,
      tasks,
    });
    const sessionDeps: SessionDeps = { store, engine, serverTools, toolbox, tasks };
    const toolTasks = new ToolTasks({
      queue: tasks,
      deps: sessionDeps,
      sub: app.redisSub,
      metrics: app.metrics,
      log: componentLog(app.log, 'tool-tasks'),
      maxResultBytes: tt.maxResultBytes,
      maxWaitingClaims: tt.maxWaitingClaims ?? 64,
    });
    app.metrics.observeRuns(engine);
    // An MCP tool's progress goes with its run's live news (numbered, through an outage, before the step's commit),
    // so it can never land before a `tool.started` still being retried; a run elsewhere (none here) writes it as is.
    app.mcp.progressSink = (id, events) => {
      const news = engine.liveNews(id);
      if (news) news.send(events);
      else store.appendEvents(id, events).catch(() => {});
    };
    app.decorate('store', store);
    app.decorate('channels', channels);
    app.decorate('engine', engine);
    app.decorate('toolbox', toolbox);
    app.decorate('memory', memory);
    app.decorate('tenantTools', registry);
    app.decorate('toolTasks', toolTasks);
    app.decorate('sessionDeps', sessionDeps);
    const sweepMs = opts.deadlineSweepMs ?? 1000;
    const deadlines = new DeadlineSweeper(sessionDeps, componentLog(app.log, 'engine'), sweepMs);
    const retention = new RetentionSweeper(store, componentLog(app.log, 'engine'), sweepMs);
    let httpCaller: HttpToolCaller | null = null;
    // V8's heap growth step by run load, where `npm start` set one (src/gc-policy.ts).
    const idlePercent = startGrowingPercent();
    const gcPolicy = idlePercent === null ? null : new GcPolicy(idlePercent, () => engine.activeRuns);
    // Memory given back once the process is quiet, where `npm start` exposed V8's `gc` (src/gc-policy.ts).
    const gcLog = componentLog(app.log, 'engine');
    const idleTrim = IdleTrim.fromRuntime(
      () => engine.activeRuns,
      (before, after) =>
        gcLog.debug(
          { heap_bytes_before: before.total, heap_bytes_after: after.total },
          'idle: memory given back',
        ),
    );
    app.addHook('onReady', async () => {
      // Redis's clock before anything decides by it (the sweeps' due reads keep it after); a failure leaves this
      // host's clock until the first of them answers.
      await store.clock
        .sync(app.redis)
        .catch((err: unknown) => app.log.warn({ err }, "Redis's clock not read at boot"));
      engine.start();
      gcPolicy?.start();
      idleTrim?.start();
      toolTasks.start();
      deadlines.start();
      retention.start();
      // Built here: the webhooks plugin (secrets, address rules) is registered after this one.
      httpCaller = new HttpToolCaller({
        queue: tasks,
        tasks: toolTasks,
        store,
        sub: app.redisSub,
        box: app.webhooks.box,
        allowPrivate: app.webhooks.allowPrivate,
        maxResultBytes: tt.maxResultBytes,
        log: componentLog(app.log, 'tool-tasks'),
        metrics: app.metrics,
      });
      httpCaller.start();
    });
    // Registered after the redis plugin, so it runs before Redis closes (onClose hooks run in reverse order).
    app.addHook('onClose', async () => {
      await Promise.all([deadlines.stop(), retention.stop(), toolTasks.stop(), httpCaller?.stop()]);
      await engine.stop(opts.shutdownGraceMs);
      gcPolicy?.stop();
      idleTrim?.stop();
      channels.close();
    });
  },
  { name: 'engine', dependencies: ['redis', 'anthropic', 'metrics', 'tracing', 'mcp'] },
);
