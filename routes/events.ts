import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../src/config.js';

/** Placeholder until the live-events work lands: the JSON page of events. */
const routes: FastifyPluginAsyncZod<{ config: Config }> = async () => {};
export default routes;
