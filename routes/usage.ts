import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { badRequest } from '../src/errors.js';
import { utcDay } from '../src/cost/spend.js';
import { errors, usageDays } from '../src/openapi/responses.js';

/** Most days one `GET /v1/usage` answers. */
const MAX_DAYS = 366;

const day = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}$/, 'a date YYYY-MM-DD (UTC)')
  .refine((d) => !Number.isNaN(Date.parse(`${d}T00:00:00Z`)) && utcDay(Date.parse(`${d}T00:00:00Z`)) === d, {
    message: 'not a calendar date',
  });

const routes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/v1/usage',
    {
      schema: {
        operationId: 'getUsage',
        summary: "The tenant's tokens and cost per UTC day (§7.4)",
        tags: ['usage'],
        querystring: z.strictObject({
          from: day.optional().meta({ description: 'First day (UTC), default `to`.' }),
          to: day.optional().meta({ description: 'Last day (UTC), default today.' }),
        }),
        response: { 200: usageDays, ...errors(400, 401, 429, 500, 503) },
      },
    },
    async (req) => {
      const to = req.query.to ?? utcDay(app.store.clock.now());
      const from = req.query.from ?? to;
      const days = (Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / 86_400_000 + 1;
      // Query checks as the schema's are answered: a list of `{path, code, message}` naming the parameter.
      const refuse = (message: string) => badRequest(message, [{ path: '/from', code: 'custom', message }]);
      if (days < 1) throw refuse(`\`from\` (${from}) is after \`to\` (${to}).`);
      if (days > MAX_DAYS)
        throw refuse(`At most ${MAX_DAYS} days at once; \`from\` is ${days - MAX_DAYS} days too early.`);
      const data = await app.store.spend.days(req.tenant, from, to);
      const total = data.reduce((sum, d) => sum + Math.round(d.cost_usd * 1e6), 0) / 1e6;
      return { object: 'usage' as const, from, to, cost_usd: total, data };
    },
  );
};

export default routes;
