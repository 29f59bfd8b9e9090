/**
 * The console's view model (public/console/view.js, a browser module without DOM code) fed with events as the
 * service writes them: streamed blocks, replays that must not override a fresher read, duplicates, tool call states,
 * thinking and compaction blocks, cost estimates. test/console/browser.test.ts covers the same code in Chromium end to end.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

// A plain JavaScript module for browsers: loaded by URL so the type checker does not look for its declarations.
const viewUrl = new URL('../../public/console/view.js', import.meta.url).href;
const {
  SessionModel,
  canCompact,
  canContinue,
  conversation,
  formatFigures,
  matchesSearch,
  parseSearch,
  sessionCost,
  formatCost,
  sessionTitle,
} = await import(viewUrl);

let seq = 0;
const ev = (type: string, data: unknown, revision: number | null = null) => ({
  id: `1000-${seq++}`,
  session_id: 'ses_test',
  type,
  at: new Date(0).toISOString(),
  revision,
  data,
});
const session = (over: Record<string, unknown> = {}) => ({
  id: 'ses_test',
  status: 'running',
  revision: 1,
  iteration: 0,
  required_action: null,
  params: { model: 'claude-sonnet-5-5' },
  usage: { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
  ...over,
});
const user = { role: 'user', content: [{ type: 'text', text: 'Hi' }] };

describe('console view model', () => {
  it('assembles a streaming turn, then shows it from the history once the history holds it', () => {
    const m = new SessionModel('ses_test');
    m.setSnapshot(session(), [user]);
    m.apply(ev('turn.started', { iteration: 1, message_count: 1 }));
    const stream = (event: unknown) => m.apply(ev('stream.event', { iteration: 1, event }));
    stream({ type: 'message_start', message: {} });
    stream({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } });
    stream({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Hmm.' } });
    stream({ type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } });
    stream({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Hel' } });
    stream({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'lo' } });
    stream({
      type: 'content_block_start',
      index: 2,
      content_block: { type: 'tool_use', id: 't1', name: 'f', input: {} },
    });
    stream({
      type: 'content_block_delta',
      index: 2,
      delta: { type: 'input_json_delta', partial_json: '{"a":' },
    });
    stream({
      type: 'content_block_delta',
      index: 2,
      delta: { type: 'input_json_delta', partial_json: '1}' },
    });
    stream({ type: 'content_block_stop', index: 2 });

    let items = conversation(m);
    assert.equal(items.length, 2);
    const live = items[1];
    assert.equal(live.live, true);
    assert.deepEqual(
      live.blocks.map((b: any) => b.type),
      ['thinking', 'text', 'tool_use'],
    );
    assert.equal(live.blocks[0].thinking, 'Hmm.');
    assert.equal(live.blocks[1].text, 'Hello');
    assert.deepEqual(live.blocks[2].input, { a: 1 });
    assert.equal(live.blocks[2].call.state, 'pending');

    const message = {
      role: 'assistant',
      content: [{ type: 'text', text: 'Hello' }],
      stop_reason: 'end_turn',
    };
    m.apply(ev('turn.completed', { iteration: 1, message }, 2));
    items = conversation(m);
    assert.equal(items.at(-1).live, false, 'completed, still shown until the history holds it');
    m.setSnapshot(session({ revision: 2, status: 'idle' }), [user, message]);
    items = conversation(m);
    assert.equal(items.length, 2, 'shown once, from the history');
    assert.equal(items[1].blocks[0].text, 'Hello');
  });

  it('drops duplicates and events out of order; a replay does not override a fresher read', () => {
    const m = new SessionModel('ses_test');
    m.setSnapshot(session({ status: 'idle', revision: 9 }), [user]);
    const old = ev('session.status', { status: 'running', required_action: null }, 3);
    m.apply(old);
    assert.equal(m.session.status, 'idle');
    m.apply(old);
    assert.equal(m.events.length, 1);
    const earlier = { ...old, id: '999-0' };
    m.apply(earlier);
    assert.equal(m.events.length, 1);
    m.apply(ev('session.status', { status: 'running', required_action: null }, 10));
    assert.equal(m.session.status, 'running');
  });

  it('a snapshot read before an event the stream already delivered does not take its status back', () => {
    // The stream ran ahead of a read in flight: the read's (older) status must not replace the event's, or a card
    // that waits for a result goes back to "pending" (its field gone) until the next read.
    const m = new SessionModel('ses_test');
    const reply = {
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'c', name: 'lookup_order', input: {} }],
      stop_reason: 'tool_use',
    };
    m.setSnapshot(session({ revision: 2 }), [user]);
    m.apply(ev('turn.started', { iteration: 1, message_count: 1 }));
    m.apply(ev('turn.completed', { iteration: 1, message: reply }, 3));
    const waiting = {
      type: 'submit_tool_results',
      tool_calls: [{ id: 'c', name: 'lookup_order', input: {} }],
    };
    m.apply(ev('session.status', { status: 'requires_action', required_action: waiting }, 3));
    const state = () => conversation(m).at(-1).blocks[0].call.state;
    assert.equal(state(), 'awaiting_result');
    // The read that was on its way when the event came: revision 2, still running.
    m.setSnapshot(session({ revision: 2, status: 'running' }), [user]);
    assert.equal(m.session.status, 'requires_action');
    assert.equal(state(), 'awaiting_result');
    // The next read holds the reply; a later status event still wins over it, an earlier one not.
    m.setSnapshot(
      session({ revision: 3, iteration: 1, status: 'requires_action', required_action: waiting }),
      [user, reply],
    );
    assert.equal(state(), 'awaiting_result');
    assert.equal(conversation(m).filter((i: any) => i.kind === 'assistant').length, 1);
    m.apply(ev('session.status', { status: 'running', required_action: null }, 4));
    assert.equal(m.session.status, 'running');
    m.setSnapshot(session({ revision: 5, iteration: 1, status: 'idle', stop_reason: 'end_turn' }), [
      user,
      reply,
    ]);
    assert.equal(m.session.status, 'idle');
  });

  it("a reply's calls under review (review_turn) are awaiting_review, not awaiting_result", () => {
    const m = new SessionModel('ses_test');
    const reply = {
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'r', name: 'researcher', input: { prompt: 'Why?' } }],
      stop_reason: 'tool_use',
    };
    const review = {
      type: 'review_turn',
      message: reply,
      tool_calls: [{ id: 'r', name: 'researcher', input: { prompt: 'Why?' } }],
      tool_results: [],
    };
    m.setSnapshot(
      session({ revision: 3, iteration: 1, status: 'requires_action', required_action: review }),
      [user, reply],
    );
    const state = () => conversation(m).at(-1).blocks[0].call.state;
    // awaiting_result drew a result form (now 409) and "Sub-agent session starting…" under the card.
    assert.equal(state(), 'awaiting_review');
    m.apply(
      ev(
        'session.status',
        {
          status: 'requires_action',
          required_action: { ...review, type: 'submit_tool_results', message: undefined },
        },
        4,
      ),
    );
    assert.equal(state(), 'awaiting_result');
  });

  it('a call approved with an edited input shows that input before the history read holds it', () => {
    const m = new SessionModel('ses_test');
    const reply = {
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'w', name: 'get_weather', input: { location: 'Paris' } }],
      stop_reason: 'tool_use',
    };
    m.setSnapshot(session({ revision: 3, iteration: 1 }), [user, reply]);
    m.apply(
      ev(
        'tool_call.decided',
        { tool_use_id: 'w', decision: 'approve', input: { location: 'Paris, France' } },
        4,
      ),
    );
    m.apply(
      ev(
        'tool.completed',
        { tool_use_id: 'w', name: 'get_weather', input: { location: 'Paris, France' }, content: 'sunny' },
        5,
      ),
    );
    const call = conversation(m)[1].blocks[0].call;
    assert.equal(call.state, 'done');
    assert.deepEqual(call.input, { location: 'Paris, France' });
  });

  it('a replay after a read that holds every turn shows each turn once, at every step', () => {
    // Opening a finished session: the read returns first, then the stream replays the log from its start — a
    // turn's `turn.started` and deltas (no revision) come before its `turn.completed`.
    const m = new SessionModel('ses_test');
    const first = { role: 'assistant', content: [{ type: 'text', text: 'One.' }], stop_reason: 'end_turn' };
    const second = { role: 'assistant', content: [{ type: 'text', text: 'Two.' }], stop_reason: 'end_turn' };
    const again = { role: 'user', content: [{ type: 'text', text: 'Again?' }] };
    m.setSnapshot(session({ revision: 6, iteration: 2, status: 'idle' }), [user, first, again, second]);
    const turns = () =>
      conversation(m)
        .filter((i: any) => i.kind === 'assistant')
        .map((t: any) => t.turn);
    const replay = [
      ev('turn.started', { iteration: 1, message_count: 1 }),
      ev('stream.event', { iteration: 1, event: { type: 'message_start', message: {} } }),
      ev('stream.event', {
        iteration: 1,
        event: { type: 'content_block_start', index: 0, content_block: { type: 'text', text: 'One.' } },
      }),
      ev('turn.completed', { iteration: 1, message: first }, 2),
      ev('message.appended', again, 4),
      ev('turn.started', { iteration: 2, message_count: 3 }),
      ev('turn.completed', { iteration: 2, message: second }, null),
    ];
    for (const e of replay) {
      m.apply(e);
      assert.deepEqual(turns(), [1, 2], `after ${e.type}`);
    }
    // A turn the read does not count yet is shown live, once.
    m.apply(ev('turn.started', { iteration: 3, message_count: 5 }));
    assert.deepEqual(turns(), [1, 2, 3]);
  });

  it('pairs tool calls with their state: approval, client results, review, running, done', () => {
    const m = new SessionModel('ses_test');
    const reply = {
      role: 'assistant',
      content: [
        { type: 'tool_use', id: 'a', name: 'get_weather', input: { location: 'Paris' } },
        { type: 'tool_use', id: 'b', name: 'lookup', input: {} },
        { type: 'tool_use', id: 'c', name: 'calculate_sum', input: { a: 1, b: 2 } },
      ],
    };
    m.setSnapshot(
      session({
        status: 'requires_action',
        required_action: {
          type: 'approve_tool_calls',
          tool_calls: [{ id: 'a', name: 'get_weather', input: { location: 'Paris' } }],
          tool_results: [{ tool_use_id: 'c', content: '3', is_error: false }],
        },
      }),
      [user, reply],
    );
    m.apply(ev('tool.started', { tool_use_id: 'b', name: 'lookup', input: {} }));
    const calls = conversation(m)[1].blocks.map((b: any) => [b.call.id, b.call.state]);
    assert.deepEqual(calls, [
      ['a', 'awaiting_approval'],
      ['b', 'running'],
      ['c', 'done'],
    ]);
    m.setSnapshot(
      session({
        status: 'idle',
        revision: 5,
        required_action: null,
      }),
      [
        user,
        reply,
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'a', content: 'Denied: not now', is_error: true },
            { type: 'tool_result', tool_use_id: 'b', content: 'ok' },
            { type: 'tool_result', tool_use_id: 'c', content: '3' },
            { type: 'text', text: 'And then?' },
          ],
        },
      ],
    );
    const items = conversation(m);
    const a = items[1].blocks[0].call;
    assert.equal(a.state, 'done');
    assert.equal(a.result.is_error, true);
    assert.equal(items.length, 3, 'the follow-up merged with the results is a user turn of its own');
    assert.deepEqual(items[2].blocks, [{ type: 'text', text: 'And then?' }]);
  });

  it('keeps compaction summaries and queued follow-ups visible', () => {
    const m = new SessionModel('ses_test');
    const compacted = {
      role: 'assistant',
      content: [{ type: 'compaction', content: 'The user asked about Paris.', encrypted_content: null }],
    };
    m.setSnapshot(session({ revision: 4 }), [compacted]);
    m.apply(ev('message.queued', { message: { role: 'user', content: 'Later' }, interrupt: false }, 5));
    const items = conversation(m);
    assert.equal(items[0].blocks[0].type, 'compaction');
    assert.equal(items[1].queued, true);
    m.apply(ev('message.appended', { role: 'user', content: [{ type: 'text', text: 'Later' }] }, 6));
    const after = conversation(m);
    assert.equal(after.length, 2);
    assert.equal(after[1].queued, undefined, 'merged: an ordinary user turn until the history is read');
  });

  it("shows the server's cost figure", () => {
    assert.equal(formatCost(sessionCost({ usage: { cost_usd: 4.8 } })), '$4.80');
    assert.equal(formatCost(sessionCost({ usage: { cost_usd: 0.0042 } })), '$0.0042');
    assert.equal(sessionCost({ usage: { cost_usd: null } }), null);
    assert.equal(formatCost(null), '—');
  });
  it('shows no phantom turn for the README example: a turn whose events carry no revision (Paris/Tokyo)', () => {
    // What the service writes when a turn's server tools are idempotent: `turn.completed` and `tool.started` apart
    // from the commit (revision null); the reply lands with its results in one commit later.
    const m = new SessionModel('ses_test');
    const ask = {
      role: 'user',
      content: [{ type: 'text', text: 'What is the weather in Paris and Tokyo?' }],
    };
    m.setSnapshot(session({ revision: 1 }), [ask]);
    const calls = {
      role: 'assistant',
      content: [
        { type: 'tool_use', id: 'p', name: 'get_weather', input: { location: 'Paris' } },
        { type: 'tool_use', id: 't', name: 'get_weather', input: { location: 'Tokyo' } },
      ],
      stop_reason: 'tool_use',
    };
    const results = {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'p', content: 'Paris: 18°C' },
        { type: 'tool_result', tool_use_id: 't', content: 'Tokyo: 22°C' },
      ],
    };
    const answer = { role: 'assistant', content: [{ type: 'text', text: 'Paris 18°C, Tokyo 22°C.' }] };
    m.apply(ev('turn.started', { iteration: 1, message_count: 1 }));
    m.apply(ev('turn.completed', { iteration: 1, message: calls }, null));
    for (const c of calls.content)
      m.apply(ev('tool.started', { tool_use_id: c.id, name: c.name, input: c.input }));
    for (const c of calls.content)
      m.apply(ev('tool.completed', { tool_use_id: c.id, name: c.name, content: 'ok', is_error: false }, 2));
    // The read after the results' commit: iteration 1 is in the history.
    m.setSnapshot(session({ revision: 2, iteration: 1 }), [ask, calls, results]);
    assert.equal(conversation(m).filter((i: any) => i.kind === 'assistant').length, 1);
    m.apply(ev('turn.started', { iteration: 2, message_count: 3 }));
    m.apply(ev('turn.completed', { iteration: 2, message: answer }, 3));
    m.setSnapshot(session({ revision: 4, iteration: 2, status: 'idle' }), [ask, calls, results, answer]);
    const turns = conversation(m).filter((i: any) => i.kind === 'assistant');
    assert.deepEqual(
      turns.map((t: any) => t.turn),
      [1, 2],
      'each assistant turn once',
    );
    assert.deepEqual(
      turns[0].blocks.map((b: any) => b.call.state),
      ['done', 'done'],
    );
    // Before the history holds it, such a turn is still shown (live) once.
    const early = new SessionModel('ses_test');
    early.setSnapshot(session({ revision: 1 }), [ask]);
    early.apply(ev('turn.started', { iteration: 1, message_count: 1 }));
    early.apply(ev('turn.completed', { iteration: 1, message: calls }, null));
    assert.equal(conversation(early).filter((i: any) => i.kind === 'assistant').length, 1);
  });

  it('shows denied calls as denied, enables Continue only when the API allows it, titles sessions', () => {
    const m = new SessionModel('ses_test');
    const reply = {
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'a', name: 'get_weather', input: { location: 'Paris' } }],
    };
    m.apply(ev('tool_call.decided', { tool_use_id: 'a', decision: 'deny', reason: 'not now', by: 'u1' }, 3));
    m.setSnapshot(session({ status: 'running', revision: 3 }), [
      user,
      reply,
      {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: 'a', content: 'not now', is_error: true }],
      },
    ]);
    const call = conversation(m)[1].blocks[0].call;
    assert.equal(call.state, 'denied');
    assert.equal(call.result.is_error, true);

    const awaiting = (type: string) => session({ status: 'requires_action', required_action: { type } });
    assert.equal(canContinue(awaiting('approve_tool_calls')), false, 'undecided approvals: 409');
    assert.equal(canContinue(awaiting('submit_tool_results')), false, 'missing results: 409');
    assert.equal(canContinue(awaiting('review_tool_results')), true);
    assert.equal(canContinue(session({ status: 'idle', stop_reason: 'budget_exhausted' })), true);
    assert.equal(canContinue(session({ status: 'idle', stop_reason: 'max_iterations' })), true);
    assert.equal(canContinue(session({ status: 'idle', stop_reason: 'end_turn' })), false);
    assert.equal(canContinue(session({ status: 'running' })), false);

    assert.equal(sessionTitle(session({ metadata: { title: ' Trip ' } }), [user]), 'Trip');
    assert.equal(sessionTitle(session({ metadata: {} }), [user]), 'Hi');
    assert.equal(
      sessionTitle(session({ metadata: {} }), [{ role: 'user', content: 'x'.repeat(100) }]).length,
      80,
    );
    assert.equal(sessionTitle(session({ metadata: {} }), []), null);
  });

  it('searches sessions: key=value asks the server, text matches id, title and metadata', () => {
    assert.equal(parseSearch('  '), null);
    assert.deepEqual(parseSearch(' chat_id=c_42 '), { metadata: { key: 'chat_id', value: 'c_42' } });
    assert.deepEqual(parseSearch('Paris Trip'), { text: 'paris trip' });
    assert.deepEqual(parseSearch('a b=c'), { text: 'a b=c' }, 'a key has no spaces');
    assert.deepEqual(parseSearch('k='), { text: 'k=' }, 'an empty value is text');
    assert.deepEqual(parseSearch(`${'k'.repeat(65)}=v`), { text: `${'k'.repeat(65)}=v` });
    const s = session({ id: 'ses_AbC', metadata: { title: 'Trip to Paris', owner: 'u7', n: 5 } });
    assert.equal(matchesSearch(s, 'abc'), true, 'id, any case');
    assert.equal(matchesSearch(s, 'paris'), true, 'title');
    assert.equal(matchesSearch(s, 'u7'), true, 'a metadata value');
    assert.equal(matchesSearch(s, 'n=5'), true, 'a metadata pair');
    assert.equal(matchesSearch(s, 'tokyo'), false);
    assert.equal(matchesSearch(session({ metadata: {} }), 'hi', [user]), true, 'the first user text');
  });

  it("enables Compact only when the API answers 202, and shows each turn's time and cost", () => {
    assert.equal(canCompact(session({ status: 'idle' })), true);
    assert.equal(canCompact(session({ status: 'failed' })), true);
    assert.equal(canCompact(session({ status: 'running' })), true);
    assert.equal(canCompact(session({ status: 'requires_action' })), false, '409 invalid_status');
    assert.equal(canCompact(session({ status: 'idle', compaction_pending: true })), false, '409');

    const m = new SessionModel('ses_test');
    const summary = { role: 'assistant', content: [{ type: 'compaction', content: 'Earlier: hi.' }] };
    const reply = { role: 'assistant', content: [{ type: 'text', text: 'Hello' }] };
    m.setSnapshot(session({ status: 'running', revision: 5, iteration: 3 }), [summary, reply]);
    // Two messages (turn 1) went into the compaction's segment: the whole record's index 2 is the history's 0.
    m.setIterations([
      { iteration: 1, reply_index: 1, usage: { cost_usd: 0.5 }, timings: { upstream_ms: 100 } },
      { iteration: 2, kind: 'compaction', reply_index: 2, usage: { cost_usd: 0.002 }, timings: {} },
      {
        iteration: 3,
        reply_index: 3,
        usage: { cost_usd: 0.25 },
        started_at: '2026-01-01T00:00:00.000Z',
        completed_at: '2026-01-01T00:00:01.500Z',
        timings: {},
      },
    ]);
    m.apply(ev('turn.started', { iteration: 4, message_count: 3 }));
    m.apply(ev('turn.completed', { iteration: 4, message: reply, usage: { cost_usd: 0.125 } }, 6));
    const items = conversation(m).filter((i: { kind: string }) => i.kind === 'assistant');
    assert.deepEqual(
      items.map((i: { figures: unknown }) => formatFigures(i.figures)),
      ['$0.0020', '1.5 s · $0.25', '$0.13'],
    );
    assert.equal(formatFigures({ ms: 420, cost: null }), '420 ms');
    assert.equal(formatFigures(null), '');
  });
});

describe('console sub-agent tree', async () => {
  const treeUrl = new URL('../../public/console/tree.js', import.meta.url).href;
  const { agentToolNames, childrenByCall, childTitle, treeActive, waitingBelow, waitingFor } = await import(
    treeUrl
  );
  const agentTool = { type: 'agent', name: 'researcher', description: 'd', session: {} };
  const approve = (id: string) => ({
    type: 'approve_tool_calls',
    tool_calls: [{ id, name: 'get_weather', input: {} }],
    tool_results: [],
  });

  it('nests each child under the call that created it, and lists what waits below each call', () => {
    const required = {
      type: 'submit_tool_results',
      tool_calls: [
        { id: 'call_a', name: 'researcher', input: { prompt: 'Why is the sky blue?' } },
        { id: 'call_b', name: 'researcher', input: { prompt: 'And the sea?' } },
      ],
      tool_results: [],
      children_waiting: [
        { session_id: 'ses_a', tool_use_id: 'call_a', required_action: approve('toolu_1') },
        {
          session_id: 'ses_b',
          tool_use_id: 'call_b',
          required_action: {
            type: 'submit_tool_results',
            tool_calls: [{ id: 'call_c', name: 'helper', input: {} }],
            tool_results: [],
            children_waiting: [
              { session_id: 'ses_c', tool_use_id: 'call_c', required_action: approve('toolu_2') },
            ],
          },
        },
      ],
    };
    const parent = session({
      status: 'requires_action',
      tools: ['get_weather', agentTool],
      required_action: required,
    });
    assert.deepEqual([...agentToolNames(parent)], ['researcher']);
    const a = { id: 'ses_a', status: 'running', parent: { session_id: 'ses_test', tool_use_id: 'call_a' } };
    const b = {
      id: 'ses_b',
      status: 'requires_action',
      tools: [{ ...agentTool, name: 'helper' }],
      required_action: required.children_waiting[1]!.required_action,
      parent: { session_id: 'ses_test', tool_use_id: 'call_b' },
    };
    const byCall = childrenByCall([a, b]);
    assert.equal(byCall.get('call_a'), a);
    assert.equal(byCall.get('call_b'), b);
    const below = waitingBelow(required);
    // The children list is fresher than the parent's read: ses_a runs again, so its approval is not shown.
    assert.deepEqual(waitingFor(a, below.get('call_a')), []);
    // ses_b waits only for its own sub-agent: the grandchild's approval is shown under call_b instead.
    assert.deepEqual(
      waitingFor(b, below.get('call_b')).map((w: any) => [w.session_id, w.depth, w.required_action.type]),
      [['ses_c', 2, 'approve_tool_calls']],
    );
    assert.equal(treeActive(parent, [a, b], agentToolNames(parent)), true);
    assert.equal(childTitle(a, { prompt: 'Why   is the sky\nblue?' }), 'Why is the sky blue?');
    assert.equal(childTitle({ ...a, metadata: { title: 'Sky' } }, { prompt: 'x' }), 'Sky');
  });

  it('stops reading the children once none works and no agent call is open', () => {
    const agents = new Set(['researcher']);
    const done = { id: 'ses_a', status: 'idle', parent: { session_id: 'ses_test', tool_use_id: 'call_a' } };
    assert.equal(treeActive(session({ status: 'idle' }), [done], agents), false);
    // The call is open and its child not listed yet: read again.
    const open = session({
      status: 'requires_action',
      required_action: {
        type: 'submit_tool_results',
        tool_calls: [{ id: 'call_b', name: 'researcher', input: {} }],
        tool_results: [],
      },
    });
    assert.equal(treeActive(open, [done], agents), true);
    assert.equal(
      treeActive(open, [done, { ...done, id: 'ses_b', parent: { tool_use_id: 'call_b' } }], agents),
      false,
    );
    // A call that waits for its approval, or a reply under review, has no child until a person acts: not read again.
    for (const type of ['approve_tool_calls', 'review_turn']) {
      const held = session({
        status: 'requires_action',
        required_action: {
          type,
          tool_calls: [{ id: 'call_b', name: 'researcher', input: {} }],
          tool_results: [],
        },
      });
      assert.equal(treeActive(held, [done], agents), false, type);
    }
  });
});
