import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { componentLog } from '../log.js';
import { Scheduler } from './scheduler.js';
import { ScheduleStore } from './store.js';

declare module 'fastify' {
  interface FastifyInstance {
    schedules: {
      store: ScheduleStore;
      maxPerTenant: number;
      /** SCHEDULES_TEST_SECONDS: 6-field crons (seconds first) are accepted. Tests only. */
      secondsCron: boolean;
    };
  }
}

/**
 * Schedules (spec §7.6): the store, and the scheduler every replica runs (started when the app is ready, stopped
 * before Redis closes).
 */
export default fp<{ config: Config }>(
  async (app, { config }) => {
    const store = new ScheduleStore(app.redis, app.store);
    const scheduler = new Scheduler({
      store,
      sessions: app.store,
      deps: app.sessionDeps,
      log: componentLog(app.log, 'schedules'),
      sweepMs: config.SCHEDULE_SWEEP_MS,
      maxSessions: config.TENANT_MAX_SESSIONS,
    });
    app.decorate('schedules', {
      store,
      maxPerTenant: config.SCHEDULES_MAX_PER_TENANT,
      secondsCron: config.SCHEDULES_TEST_SECONDS,
    });
    app.addHook('onReady', async () => scheduler.start());
    app.addHook('onClose', async () => scheduler.stop());
  },
  { name: 'schedules', dependencies: ['redis', 'engine'] },
);
