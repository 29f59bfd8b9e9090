import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text } from '../fake/script.js';
import type { FakeRequest } from '../../src/offline/wire.js';

/**
 * PATCH `tools` of a session with Anthropic's MCP connector (`mcp_toolset`): the API names a toolset by its server,
 * never by a tool name, and takes a toolset's definition in a `tool_addition` only with its beta.
 */
const MCP_SERVERS = [{ type: 'url', name: 'srv', url: 'https://mcp.example.com/mcp' }];
const PARAMS = { betas: ['mcp-client-2025-11-20'], mcp_servers: MCP_SERVERS };
const TOOLSET = { type: 'mcp_toolset', mcp_server_name: 'srv' };
const REMOVAL = { type: 'tool_removal', tool: { type: 'mcp_toolset_reference', server_name: 'srv' } };
const ADDITION = { type: 'tool_addition', tool: { type: 'tool_definition', definition: TOOLSET } };

const betas = (r: FakeRequest) => String(r.headers['anthropic-beta'] ?? '');
/** The `system` messages (tool changes) of the conversation a request sent. */
const changes = (r: FakeRequest) => r.messages.filter((m) => m.role === 'system').map((m) => m.content);

describe('PATCH tools: an MCP toolset (Anthropic MCP connector)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  const patch = (id: string, body: unknown) => h.api.req('PATCH', `/v1/sessions/${id}`, body);
  const history = async (id: string) => (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
  /** Posts a message to `id` and waits for the run it starts to end: the request it sent. */
  const turn = async (id: string, iteration: number, reply: string) => {
    h.fake.enqueue(text(reply));
    const before = h.fake.requests.length;
    const posted = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Next' });
    assert.ok(posted.status < 300, JSON.stringify(posted.body));
    // Its end: a failure, or the reply of that iteration.
    const done = await h.api.waitFor(
      id,
      (x) => x.status === 'failed' || (x.status !== 'running' && x.iteration >= iteration),
    );
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.iteration, iteration);
    assert.equal(h.fake.requests.length, before + 1);
    const sent = h.fake.requests.at(-1)!;
    assert.equal(sent.status, 200);
    return sent;
  };

  it('the fake checks toolset changes as the API does', async () => {
    const post = (body: unknown, beta = 'inline-tools-2026-09-15,mcp-client-2025-11-20') =>
      fetch(`${h.fake.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'anthropic-beta': beta },
        body: JSON.stringify(body),
      });
    const base = { model: 'm', max_tokens: 10, mcp_servers: MCP_SERVERS };
    const withSet = { ...base, tools: [TOOLSET] };
    const user = { role: 'user', content: 'hi' };
    const system = (...content: unknown[]) => ({ role: 'system', content });
    const status = async (body: unknown, beta?: string) => (await post(body, beta)).status;
    assert.equal(await status({ ...withSet, messages: [user, system(REMOVAL)] }), 200);
    // The service's key is no tool's name; a toolset not available there is not removed.
    const byKey = { type: 'tool_removal', tool: { type: 'tool_reference', name: 'mcp_toolset:srv' } };
    assert.equal(await status({ ...withSet, messages: [user, system(byKey)] }), 400);
    assert.equal(await status({ ...base, tools: [], messages: [user, system(REMOVAL)] }), 400);
    assert.equal(await status({ ...withSet, messages: [user, system(REMOVAL), system(REMOVAL)] }), 400);
    // A definition needs its beta and a server of `mcp_servers`; then it may be removed.
    const both = 'inline-tools-2026-09-15,mcp-client-2025-11-20,mcp-client-2026-09-15';
    assert.equal(await status({ ...base, messages: [user, system(ADDITION)] }), 400, 'no beta');
    assert.equal(await status({ ...base, messages: [user, system(ADDITION), system(REMOVAL)] }, both), 200);
    const elsewhere = {
      ...ADDITION,
      tool: { ...ADDITION.tool, definition: { ...TOOLSET, mcp_server_name: 'x' } },
    };
    assert.equal(await status({ ...base, messages: [user, system(elsewhere)] }, both), 400);
  });

  it('removing a toolset tells `mcp_toolset_reference`; history in, history out and forks keep the set', async () => {
    h.fake.enqueue(text('One.'));
    const s = await h.api.post('/v1/sessions', {
      params: PARAMS,
      tools: ['get_weather', TOOLSET],
      input: 'Hi',
    });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    const id = s.body.id;
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 1);
    const p = await patch(id, { tools: ['get_weather'] });
    assert.equal(p.status, 200, JSON.stringify(p.body));

    const second = await turn(id, 2, 'Two.');
    // `tools` stay the set at create (the prompt cache's prefix); the change names the toolset by its server.
    assert.deepEqual(second.tools, (h.fake.requests[0]!.body.tools as unknown[]) ?? []);
    assert.deepEqual(changes(second), [[REMOVAL]]);
    const msgs = await history(id);
    assert.deepEqual(
      msgs.filter((m: any) => m.role === 'system').map((m: any) => m.content),
      [[REMOVAL]],
    );
    const events = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
    const applied = events.find((e: any) => e.type === 'tools.applied');
    assert.deepEqual(applied.data.removed, ['mcp_toolset:srv']);
    // The next turn sends the same history again: accepted.
    const third = await turn(id, 3, 'Three.');
    assert.deepEqual(changes(third), [[REMOVAL]]);

    // History in, history out: the session's history with its tools makes a session whose requests are accepted.
    const again = await h.api.post('/v1/sessions', {
      params: PARAMS,
      tools: ['get_weather'],
      messages: await history(id),
    });
    assert.equal(again.status, 201, JSON.stringify(again.body));
    assert.deepEqual(again.body.tools, ['get_weather']);
    const copied = await turn(again.body.id, again.body.iteration + 1, 'Four.');
    assert.ok(
      copied.tools.some((t: any) => t.type === 'mcp_toolset' && t.mcp_server_name === 'srv'),
      'the set from before the removal is sent as `tools`',
    );
    assert.deepEqual(changes(copied), [[REMOVAL]], 'told nothing more');

    // A fork after the change keeps its history and tools; one before it is told the removal.
    for (const [at, told] of [
      [2, [[REMOVAL]]],
      [1, [[REMOVAL]]],
    ] as const) {
      const f = await h.api.post(`/v1/sessions/${id}/fork`, { at_iteration: at });
      assert.equal(f.status, 201, JSON.stringify(f.body));
      assert.deepEqual(f.body.tools, ['get_weather']);
      const sent = await turn(f.body.id, at + 1, 'Forked.');
      assert.deepEqual(changes(sent), told, `fork at ${at}`);
    }
  });

  it('adding a toolset tells its definition with the beta it needs; removing it again is accepted', async () => {
    h.fake.enqueue(text('One.'));
    const s = await h.api.post('/v1/sessions', { params: PARAMS, tools: ['get_weather'], input: 'Hi' });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    const id = s.body.id;
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 1);
    assert.equal((await patch(id, { tools: ['get_weather', TOOLSET] })).status, 200);
    const second = await turn(id, 2, 'Two.');
    assert.deepEqual(changes(second), [[ADDITION]]);
    assert.match(betas(second), /mcp-client-2026-09-15/);
    assert.equal((await patch(id, { tools: ['get_weather'] })).status, 200);
    const third = await turn(id, 3, 'Three.');
    assert.deepEqual(changes(third), [[ADDITION], [REMOVAL]]);
    assert.match(betas(third), /mcp-client-2026-09-15/);
    // History in, history out: the definition in the history brings its beta.
    const again = await h.api.post('/v1/sessions', {
      params: PARAMS,
      tools: ['get_weather'],
      messages: await history(id),
    });
    assert.equal(again.status, 201, JSON.stringify(again.body));
    const copied = await turn(again.body.id, again.body.iteration + 1, 'Four.');
    assert.deepEqual(changes(copied), [[ADDITION], [REMOVAL]]);
    assert.match(betas(copied), /mcp-client-2026-09-15/);
  });

  it('a toolset removed with a named tool: its own message, then the runner’s', async () => {
    h.fake.enqueue(text('One.'));
    const s = await h.api.post('/v1/sessions', {
      params: PARAMS,
      tools: ['get_weather', 'calculate_sum', TOOLSET],
      input: 'Hi',
    });
    const id = s.body.id;
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 1);
    assert.equal((await patch(id, { tools: ['get_weather'] })).status, 200);
    const second = await turn(id, 2, 'Two.');
    assert.deepEqual(changes(second), [
      [REMOVAL],
      [{ type: 'tool_removal', tool: { type: 'tool_reference', name: 'calculate_sum' } }],
    ]);
    const msgs = await history(id);
    assert.deepEqual(second.messages, msgs.slice(0, -1), 'the stored history is what the model saw');
  });
});
