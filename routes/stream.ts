import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../src/config.js';

const routes: FastifyPluginAsyncZod<{ config: Config }> = async () => {};
export default routes;
