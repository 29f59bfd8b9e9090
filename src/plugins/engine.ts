import fp from 'fastify-plugin';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { serverTools } from '../../tools/index.js';
import { Engine } from '../engine/engine.js';
import { SessionService } from '../sessions/service.js';
import { SessionChannels } from '../store/channels.js';
import { SessionStore, type StoreOptions } from '../store/store.js';
import { componentLog } from '../log.js';
import { serverToolProvider, Toolbox } from '../toolbox.js';
import { memoryProvider } from '../memory/tool.js';
import { MemoryStore, type MemoryLimits } from '../store/memory.js';

declare module 'fastify' {
  interface FastifyInstance {
    store: SessionStore;
    /** The sessions' pub/sub channels on the subscriber connection (events notices, run control). */
    channels: SessionChannels;
    engine: Engine;
    /** Every source of tools the service runs: server tools, MCP servers, … (`GET /v1/tools`, session checks). */
    toolbox: Toolbox;
    sessions: SessionService;
    /** The memory tool's files, per tenant (`routes/memory.ts`). */
    memory: MemoryStore;
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
    const toolbox = new Toolbox(
      [serverToolProvider(serverTools), memoryProvider(memory), app.mcp],
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
    });
    app.metrics.observeRuns(engine);
    app.mcp.progressSink = (id, events) => {
      store.appendEvents(id, events).catch(() => {});
    };
    app.decorate('store', store);
    app.decorate('channels', channels);
    app.decorate('engine', engine);
    app.decorate('toolbox', toolbox);
    app.decorate('memory', memory);
    app.decorate('sessions', new SessionService(store, engine, serverTools, toolbox));
    app.addHook('onReady', async () => engine.start());
    // Registered after the redis plugin, so it runs before Redis closes (onClose hooks run in reverse order).
    app.addHook('onClose', async () => {
      await engine.stop(opts.shutdownGraceMs);
      channels.close();
    });
  },
  { name: 'engine', dependencies: ['redis', 'anthropic', 'metrics', 'tracing', 'mcp'] },
);
