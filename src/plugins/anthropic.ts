import Anthropic from '@anthropic-ai/sdk';
import fp from 'fastify-plugin';
import { componentLog } from '../log.js';
import { countingFetch } from '../observability/upstream-fetch.js';

declare module 'fastify' {
  interface FastifyInstance {
    anthropic: Anthropic;
    /** `offline` when the built-in fake model answers (no ANTHROPIC_API_KEY), else `anthropic`. */
    modelBackend: 'offline' | 'anthropic';
  }
}

export interface AnthropicPluginOptions {
  apiKey: string;
  baseURL?: string | undefined;
  maxRetries: number;
  offline: boolean;
}

export default fp<AnthropicPluginOptions>(
  async (app, opts) => {
    const client = new Anthropic({
      apiKey: opts.apiKey,
      ...(opts.baseURL ? { baseURL: opts.baseURL } : {}),
      maxRetries: opts.maxRetries,
      // The SDK's own spans (model calls, tool runner, tools) on this instance's provider; none when tracing is off.
      openTelemetry: app.tracing.sdkOption,
      // Each attempt counted and each failure logged (src/observability/upstream-fetch.ts).
      fetch: countingFetch(app.metrics, componentLog(app.log, 'upstream')),
    });
    app.decorate('anthropic', client);
    app.decorate('modelBackend', opts.offline ? 'offline' : 'anthropic');
  },
  { name: 'anthropic', dependencies: ['tracing', 'metrics'] },
);
