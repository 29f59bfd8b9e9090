import fp from 'fastify-plugin';
import { EventHub } from '../events/hub.js';
import { componentLog } from '../log.js';
import { EventLog } from '../store/events.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The relay of session events to this process's WebSocket and SSE clients (src/events/hub.ts). */
    eventsHub: EventHub;
  }
}

export interface EventsHubPluginOptions {
  /** Byte budget of one page of the log (REPLAY_PAGE_BYTES). */
  pageBytes: number;
  /** Bytes one tenant's streams may hold queued in this process (TENANT_MAX_STREAM_BUFFERED_BYTES). */
  tenantBufferedBytes: number;
}

/**
 * One event hub per service instance, on the store's event log reads and session channels. Closed on close: its
 * clients get `shutting_down` before the engine stops and Redis closes (onClose hooks run in reverse order).
 */
export default fp<EventsHubPluginOptions>(
  async (app, opts) => {
    const hub = new EventHub({
      eventLog: new EventLog(app.redis),
      channels: app.channels,
      logger: componentLog(app.log, 'events'),
      pageBytes: opts.pageBytes,
      tenantBufferedBytes: opts.tenantBufferedBytes,
      metrics: app.metrics,
    });
    app.decorate('eventsHub', hub);
    app.addHook('onClose', async () => hub.close());
  },
  { name: 'events-hub', dependencies: ['redis', 'engine', 'metrics'] },
);
