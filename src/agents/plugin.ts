import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { componentLog } from '../log.js';
import { AgentSweep } from './sweep.js';

declare module 'fastify' {
  interface FastifyInstance {
    agents: AgentSweep;
  }
}

/** Sub-agents (spec §7.6; sweep.ts): the sweep every replica runs, started when the app is ready. */
export default fp<{ config: Config }>(
  async (app, { config }) => {
    const sweep = new AgentSweep({
      redis: app.redis,
      store: app.store,
      deps: app.sessionDeps,
      log: componentLog(app.log, 'agents'),
      sweepMs: config.AGENT_SWEEP_MS,
      maxSessions: config.TENANT_MAX_SESSIONS,
    });
    app.decorate('agents', sweep);
    app.addHook('onReady', async () => sweep.start());
    app.addHook('onClose', async () => sweep.stop());
  },
  { name: 'agents', dependencies: ['redis', 'engine'] },
);
