/**
 * A DELETE of a session whose turn is in flight: the session's usage goes with it, but what the turn cost still counts
 * in its tenant's day (TENANT_MAX_COST_USD_PER_DAY, GET /v1/usage), once — as a cancel at the same point bills it.
 * Deleting sessions mid-turn must not be a way around the cap (docs/API.md §3.11).
 */
import '../helpers/test-tools-env.js';
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { text, toolCall } from '../fake/script.js';
import { until } from '../durability/chaos-lib.js';

describe("cost: a DELETE mid-turn still charges the tenant's day", () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({
      env: { API_KEYS: 'a:key-a,b:key-b,c:key-c', TENANT_MAX_COST_USD_PER_DAY: '0.01' },
    });
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  /** The runs of this process: their end (after the delete) is the last point anything of theirs is billed. */
  const activeRuns = async () => {
    const metrics = await (await fetch(`${h.service.url}/metrics`)).text();
    return Number(/^trs_active_runs (\d+)/m.exec(metrics)?.[1]);
  };
  const eventSeen = async (api: Api, id: string, match: (e: any) => boolean) =>
    until(
      async () => (await api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data.some(match),
      20_000,
      'the event',
    );

  /** The tenant's day once its run has ended, and that the cap now refuses its next run. */
  async function dayAfterDelete(api: Api, id: string) {
    assert.equal((await api.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal((await api.get(`/v1/sessions/${id}`)).status, 404);
    await until(async () => (await activeRuns()) === 0, 20_000, 'the deleted run ended');
    const day = (await api.get('/v1/usage')).body.data[0];
    const next = await api.post('/v1/sessions', { model: 'claude-sonnet-5-5', input: 'Hi' });
    assert.equal(next.status, 429, JSON.stringify(next.body));
    assert.equal(next.body.error.details.quota, 'cost_usd_per_day');
    return day;
  }

  it('a turn deleted mid-stream is billed for what it streamed', async () => {
    const a = h.api.as('key-a');
    h.fake.enqueue(
      text('word '.repeat(600), {
        hangAfterEvents: 4,
        usage: {
          input_tokens: 10_000,
          output_tokens: 900,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
        },
      }),
    );
    const r = await a.post('/v1/sessions', {
      model: 'claude-sonnet-5-5',
      input: 'Write at length',
      stream: true,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await eventSeen(
      a,
      r.body.id,
      (e) => e.type === 'stream.event' && e.data.event.type === 'content_block_delta',
    );
    const day = await dayAfterDelete(a, r.body.id);
    // What message_start said (the output so far: its 1 token): 10,000×2 + 1×10 = 20,010 µ$ on claude-sonnet-5-5.
    assert.equal(day.input_tokens, 10_000);
    assert.equal(day.output_tokens, 1);
    assert.equal(day.cost_usd, 0.02001);
  });

  it('a reply whose idempotent tool is still running when the DELETE comes is billed whole', async () => {
    const b = h.api.as('key-b');
    h.fake.enqueue(
      toolCall('sleep_idempotent', { ms: 60_000 }, { usage: { input_tokens: 10_000, output_tokens: 100 } }),
      text('Slept.'),
    );
    const r = await b.post('/v1/sessions', {
      model: 'claude-sonnet-5-5',
      tools: ['sleep_idempotent'],
      input: 'Sleep',
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    // Its reply is not committed while the tool runs (one commit with its results): it is billed with that commit.
    await eventSeen(b, r.body.id, (e) => e.type === 'tool.started');
    const day = await dayAfterDelete(b, r.body.id);
    // 10,000×2 + 100×10 = 21,000 µ$.
    assert.equal(day.input_tokens, 10_000);
    assert.equal(day.output_tokens, 100);
    assert.equal(day.cost_usd, 0.021);
    assert.equal(h.fake.requests.length, 1, 'the turn after the tool was never sent');
  });
});
