import type { FastifyInstance } from 'fastify';
import { AgentSweep } from '../../src/agents/sweep.js';
import type { FakeRequest } from '../../src/offline/wire.js';
import type { SessionStore } from '../../src/store/store.js';
import { startHarness, type Harness } from './service.js';
import { apiError, text, toolCall } from '../fake/script.js';

const systemOf = (req: FakeRequest) =>
  typeof req.body.system === 'string' ? req.body.system : (req.body.system ?? []).map((b) => b.text).join('');

/** The writer asks its researcher, then writes from the findings; the researcher answers (or waits for a client tool: `waits`; or its upstream refuses it: `broken`). */
export function writerResearcher(req: FakeRequest) {
  const sys = systemOf(req);
  const last = req.body.messages.at(-1);
  const blocks = Array.isArray(last?.content) ? last.content : [];
  const result = blocks.find((b) => b.type === 'tool_result');
  if (sys.includes('researcher')) {
    if (sys.includes('waits') && !result) return toolCall('lookup', {});
    if (sys.includes('broken'))
      return apiError(400, 'invalid_request_error', { message: 'broken researcher' });
    return text('Findings: Rayleigh scattering makes the sky blue.');
  }
  if (!result) return toolCall('researcher', { prompt: 'Why is the sky blue?' });
  const content = result.type === 'tool_result' ? result.content : '';
  const found =
    typeof content === 'string' ? content : (content ?? []).map((c) => ('text' in c ? c.text : '')).join('');
  return text(
    `Article, from the research (error: ${String(result.type === 'tool_result' && result.is_error === true)}): ${found}`,
  );
}

/** A writer session with a `researcher` sub-agent (the create body; `writerResearcher` is its model). */
export const writerWithResearcher = {
  system: 'You are a writer.',
  input: 'Write about the sky.',
  tools: [
    {
      type: 'agent',
      name: 'researcher',
      description: 'Researches a question.',
      session: { system: 'You are a researcher.' },
    },
  ],
};

/** A three-level tree: each level calls the one below once (the fetcher calls `get_weather`), then answers. */
export function writerResearcherFetcher(req: FakeRequest) {
  // The effective system prompt (a thread's `continue` request carries none: the fake keeps it).
  const sys = JSON.stringify(req.system ?? '');
  const last = req.messages.at(-1);
  const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
  if (sys.includes('fetcher'))
    return answered ? text('Fetched: sunny.') : toolCall('get_weather', { location: 'Paris' });
  if (sys.includes('researcher'))
    return answered ? text('Findings: it is sunny.') : toolCall('fetcher', { prompt: 'Weather in Paris?' });
  return answered ? text('Article: a sunny day.') : toolCall('researcher', { prompt: 'Is it sunny?' });
}

/** An `agent` tool entry named `name`, whose child session is `session`. */
export const agentTool = (name: string, session: Record<string, unknown>) => ({
  type: 'agent',
  name,
  description: `The ${name}.`,
  session,
});

/**
 * An agents' sweep on `app`'s Redis and store (or `store`, a proxy a test watches through) that never runs by
 * itself: the test runs its passes (`pass`, what its loop does every AGENT_SWEEP_MS).
 */
export function drivenSweep(app: FastifyInstance, store: SessionStore = app.store) {
  const sweep = new AgentSweep({
    redis: app.redis,
    store,
    deps: app.sessionDeps,
    log: app.log,
    sweepMs: 3_600_000,
    maxSessions: 0,
  });
  // A wake-up written before a pass is due for it: its score is Redis's TIME to the microsecond (tree-due-3.lua),
  // which the pass's read compares with (tree-due-read-1.lua).
  const pass = () => (sweep as unknown as { sweep(): Promise<void> }).sweep();
  return { sweep, pass };
}

/** A driven sweep whose looks are recorded (each look reads its member first): `looked`, in order. */
export function recordedSweep(app: FastifyInstance) {
  const looked: string[] = [];
  const store = new Proxy(app.store, {
    get(target, key) {
      if (key === 'load')
        return (id: string) => {
          looked.push(id);
          return target.load(id);
        };
      return Reflect.get(target, key) as unknown;
    },
  }) as SessionStore;
  const { pass } = drivenSweep(app, store);
  return { looked, pass };
}

/**
 * A service (tenants `a` and `b`, keys `key-a`, `key-b`) whose model is `writerResearcher` and whose own agents'
 * sweep is stopped: the test drives sweeps of its own (`drivenSweep`).
 */
export async function harnessWithoutSweep(): Promise<Harness> {
  const h = await startHarness({ env: { API_KEYS: 'a:key-a,b:key-b', AGENT_SWEEP_MS: '3600000' } });
  h.fake.setHandler(writerResearcher);
  await h.service.app.agents.stop();
  return h;
}
