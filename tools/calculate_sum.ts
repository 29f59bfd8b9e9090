import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { z } from 'zod';
import type { ServerTool } from './types.js';

const calculateSumTool: ServerTool = {
  tool: betaZodTool({
    name: 'calculate_sum',
    description: 'Add two numbers and return the sum as text.',
    inputSchema: z.object({
      a: z.number().describe('The first addend'),
      b: z.number().describe('The second addend'),
    }),
    run: ({ a, b }) => {
      const sum = a + b;
      if (!Number.isFinite(sum)) throw new Error(`The sum of ${a} and ${b} is too large to represent`);
      return String(sum === 0 ? 0 : sum);
    },
  }),
  requiresApproval: false,
  idempotent: true,
};

export default calculateSumTool;
