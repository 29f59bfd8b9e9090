/**
 * A parent parked on its sub-agent goes on as soon as the child ends, whatever ends it (found by a review): the
 * agents' sweep looks at a parked parent only every minute, so a child that ends without a run's end must wake the
 * tree itself — failed by its own action deadline (`on_action_timeout: fail`), or taken out of its review by a
 * history replaced (`PUT …/messages`). And a child that waited for its client and was answered leaves its parent's
 * `children.waiting` list at once, not at its run's end.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import type { FakeRequest } from '../../src/offline/wire.js';
import { text, toolCall } from '../fake/script.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';
import { treeDueKey } from '../../src/store/tree-due.js';

/** Well under the parked parent's next look (a minute): only a wake-up gets it going within this. */
const WOKEN_WITHIN_MS = 30_000;

const systemOf = (req: FakeRequest) => JSON.stringify(req.system ?? '');
/** The writer asks its researcher; a researcher "who waits" calls its client's `lookup` first. */
function writerAndResearcher(req: FakeRequest) {
  const last = req.messages.at(-1);
  const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
  if (systemOf(req).includes('researcher')) {
    if (systemOf(req).includes('waits') && !answered) return toolCall('lookup', {});
    return text('Findings: blue.');
  }
  if (!answered) return toolCall('researcher', { prompt: 'Why is the sky blue?' });
  return text('Article done.');
}
const lookup = {
  name: 'lookup',
  description: 'a client tool',
  input_schema: { type: 'object', properties: {} },
};
const writer = (session: Record<string, unknown>) => ({
  system: 'You are a writer.',
  input: 'go',
  tools: [{ type: 'agent', name: 'researcher', description: 'Researches.', session }],
});

describe('a parked parent whose child ends without a run end', { timeout: 120_000 }, () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    h = await startHarness({
      env: { ACTION_TIMEOUT_MIN_S: '1', DEADLINE_SWEEP_MS: '50', AGENT_SWEEP_MS: '50' },
    });
    h.fake.setHandler(writerAndResearcher);
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  const childOf = (pid: string) =>
    until(async () => (await h.api.get(`/v1/sessions/${pid}/children`)).body.data[0], 20_000, 'the child');
  /** The parent's next look is the parked one (a minute away): what follows is a wake-up's doing. */
  const parked = (pid: string) =>
    until(
      async () => Number(await r.zscore(treeDueKey('default'), pid)) > Date.now() + 30_000,
      20_000,
      'the parent parked',
    );

  /** The lengths of the `children_waiting` lists the parent's log told, oldest first. */
  const told = async (pid: string) =>
    (
      (await h.api.get(`/v1/sessions/${pid}/events?limit=1000`)).body.data as Array<{
        type: string;
        data: any;
      }>
    )
      .filter((e) => e.type === 'children.waiting')
      .map((e) => e.data.children_waiting.length);

  it('a child failed by its own action deadline', async () => {
    const p = (
      await h.api.post(
        '/v1/sessions',
        writer({
          system: 'You are a researcher who waits.',
          tools: [lookup],
          action_timeout_s: 2,
          on_action_timeout: 'fail',
        }),
      )
    ).body;
    const child = await childOf(p.id);
    await parked(p.id);
    await h.api.waitStatus(child.id, 'failed', 20_000);
    const done = await h.api.waitFor(p.id, (s) => s.status === 'idle', WOKEN_WITHIN_MS);
    const history = (await h.api.get(`/v1/sessions/${done.id}/messages`)).body.data;
    assert.match(JSON.stringify(history[2].content), /is_error/);
  });

  // A waiting child moved on by its client's answer, or by its action deadline's denial: its run starts, and the
  // parent's `children.waiting` clears then, not at that run's end (held here until the clear is told).
  for (const by of ['its client', 'its action deadline'] as const) {
    it(`a waiting child answered by ${by}: the parent's children.waiting is cleared before the child's run ends`, async () => {
      let release!: () => void;
      const held = new Promise<void>((done) => (release = done));
      h.fake.setHandler(async (req) => {
        const reply = writerAndResearcher(req);
        if (systemOf(req).includes('waits') && JSON.stringify(req.messages.at(-1)).includes('tool_result'))
          await held;
        return reply;
      });
      try {
        const deadline = by === 'its client' ? {} : { action_timeout_s: 2 };
        const body = writer({ system: 'You are a researcher who waits.', tools: [lookup], ...deadline });
        const p = (await h.api.post('/v1/sessions', body)).body;
        const child = await childOf(p.id);
        const last = async () => ((await told(p.id)).at(-1) ?? null) as number | null;
        await until(
          async () => ((await last()) === 1 ? true : null),
          20_000,
          'the parent tells its child waits',
        );
        await parked(p.id);
        if (by === 'its client') {
          const call = (await h.api.waitStatus(child.id, 'requires_action', 20_000)).required_action
            .tool_calls[0];
          const sent = await h.api.post(`/v1/sessions/${child.id}/tool-results`, {
            results: [{ tool_use_id: call.id, content: 'found' }],
          });
          assert.ok(sent.status < 300, JSON.stringify(sent.body));
        }
        // Before: told only at the child's run end, which waits for this.
        await until(async () => ((await last()) === 0 ? true : null), WOKEN_WITHIN_MS, 'nothing waits, told');
        assert.equal((await h.api.get(`/v1/sessions/${child.id}`)).body.status, 'running');
        release();
        await h.api.waitFor(p.id, (s) => s.status === 'idle', WOKEN_WITHIN_MS);
        assert.deepEqual(await told(p.id), [1, 0]);
      } finally {
        release();
        h.fake.setHandler(writerAndResearcher);
      }
    });
  }

  it('a reviewing child whose history is replaced', async () => {
    const p = (
      await h.api.post('/v1/sessions', writer({ system: 'You are a researcher.', pause_after_turn: true }))
    ).body;
    const child = await childOf(p.id);
    await h.api.waitStatus(child.id, 'requires_action', 20_000);
    await parked(p.id);
    // The child's own look after its run's end is done (a client's PUT comes later).
    await until(
      async () => Number(await r.zscore(treeDueKey('default'), child.id)) > Date.now() + 30_000,
      20_000,
      'the child looked at',
    );
    const put = await h.api.req('PUT', `/v1/sessions/${child.id}/messages`, {
      messages: [
        { role: 'user', content: 'Why is the sky blue?' },
        { role: 'assistant', content: [{ type: 'text', text: 'Edited findings.' }] },
      ],
    });
    assert.ok(put.status < 300, JSON.stringify(put.body));
    const done = await h.api.waitFor(p.id, (s) => s.status === 'idle', WOKEN_WITHIN_MS);
    const history = (await h.api.get(`/v1/sessions/${done.id}/messages`)).body.data;
    assert.match(JSON.stringify(history[2].content), /Edited findings/);
    // The history its client gave ends with a reply: that is the child's answer, no error (no run stopped it short).
    const result = history[2].content.find((b: { type: string }) => b.type === 'tool_result');
    assert.deepEqual([result.content, result.is_error === true], ['Edited findings.', false]);
  });
});
