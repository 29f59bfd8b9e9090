/** The bodies of the tenant tool and tool task routes (spec §7.1), bounded. */
import { z } from 'zod';
import { clientTool, toolResultBody } from '../schemas.js';

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const toolName = z.string().regex(TOOL_NAME, 'tool names are 1-64 of [a-zA-Z0-9_-]');

export const toolNameParam = z.strictObject({ name: toolName });

export const putToolBody = z.strictObject({
  description: z.string().max(10_000),
  input_schema: clientTool.shape.input_schema,
  runner: z.discriminatedUnion('type', [
    z.strictObject({ type: z.literal('worker') }),
    z.strictObject({
      type: z.literal('http'),
      url: z.string().min(1).max(2048),
      /** One HTTP attempt's deadline, until the answer's body has ended (ms). */
      timeout_ms: z.number().int().min(100).max(600_000).optional(),
    }),
  ]),
  idempotent: z.boolean().default(false),
  read_only: z.boolean().default(false),
  timeout_ms: z.number().int().min(1000).max(3_600_000).default(600_000),
  max_attempts: z.number().int().min(1).max(10).default(3),
});

export const claimBody = z.strictObject({
  tools: z.array(toolName).min(1).max(64),
  max: z.number().int().min(1).max(100).default(1),
  wait_ms: z.number().int().min(0).max(30_000).default(0),
  worker_id: z
    .string()
    .regex(/^[\x21-\x7e]{1,128}$/, 'worker_id: 1-128 printable ASCII characters without spaces')
    .default('anonymous'),
});

export const taskIdParam = z.strictObject({
  id: z.string().regex(/^tt_[A-Za-z0-9]{1,40}$/, 'a task id: tt_…'),
});

export const taskResultBody = toolResultBody;
