/**
 * A sub-agent's result is its final text (spec §7.6: "its final text is the call's result (`is_error` if it
 * fails)"): the text of the child's last assistant message, never an earlier turn's, and `is_error` when the child
 * stopped before the model ended its turn — at `max_iterations`, `max_tokens`, `refusal`, a stop reason the service
 * does not know —, saying why and carrying the child's last text when it has one (bounded by TOOL_RESULT_MAX_BYTES).
 * Before, the sweep walked back to the last assistant message with any text and answered it as a success whatever
 * the child's stop reason: an interim remark of an earlier turn, "(the sub-agent gave no text)" for a refusal, a
 * cut answer.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { FakeRequest } from '../../src/offline/wire.js';
import { reply, text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { agentTool } from '../helpers/agents.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';

const INTERIM = 'INTERIM: let me check the weather first';
const weather = () => toolUse('get_weather', { location: 'Paris' });

/** The writer asks its researcher once; the researcher (its system says which) answers in its own way. */
function model(req: FakeRequest) {
  // The effective system prompt (a thread's `continue` request carries none: the fake keeps it).
  const sys = JSON.stringify(req.system ?? '');
  const last = req.messages.at(-1);
  const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
  const kind = /researcher who (\w+)/.exec(sys)?.[1];
  // A writer whose prompt to its researcher is blank.
  if (sys.includes('writer who mumbles'))
    return answered ? text('Article done.') : toolCall('researcher', { prompt: ' \n ' });
  switch (kind) {
    case undefined:
      return answered ? text('Article done.') : toolCall('researcher', { prompt: 'Weather in Paris?' });
    // A remark and a call, then the final answer (`end_turn`).
    case 'finishes':
      return answered ? text('Sunny, 21°C.') : toolCalls([weather()], { preamble: INTERIM });
    // A remark and a call, then a call alone: the run's 2 iterations are spent (`max_iterations`).
    case 'loops':
      return answered ? toolCalls([weather()]) : toolCalls([weather()], { preamble: INTERIM });
    case 'refuses':
      return reply([], { stop_reason: 'refusal' });
    case 'truncates':
      return text('The weather in Paris is', { stop_reason: 'max_tokens' });
    case 'rambles':
      return text('rain '.repeat(1000), { stop_reason: 'max_tokens' });
    // Under TOOL_RESULT_MAX_BYTES (4096) alone, past it with the error's words before it.
    case 'overflows':
      return text('x'.repeat(4050), { stop_reason: 'max_tokens' });
    case 'surprises':
      return text('Partly', { stop_reason: 'a_reason_of_tomorrow' });
    default:
      throw new Error(`no researcher ${kind}`);
  }
}

describe(
  "a sub-agent's result is its final text, is_error when it did not finish",
  { timeout: 120_000 },
  () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ env: { AGENT_SWEEP_MS: '50', TOOL_RESULT_MAX_BYTES: '4096' } });
      h.fake.setHandler(model);
    });
    after(() => h?.close());

    /** A writer whose researcher is `kind`, run to its end: the child's stop reason and the call's result. */
    async function delegate(kind: string) {
      const researcher = agentTool('researcher', {
        system: `You are a researcher who ${kind}.`,
        tools: ['get_weather'],
        max_iterations: 2,
      });
      const res = await h.api.post('/v1/sessions', {
        system: 'You are a writer.',
        input: 'go',
        tools: [researcher],
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const parent = await h.api.waitFor(res.body.id, (s) => s.status === 'idle', 30_000);
      assert.equal(parent.stop_reason, 'end_turn');
      const [child] = (await h.api.get(`/v1/sessions/${parent.id}/children`)).body.data;
      const history = (await h.api.get(`/v1/sessions/${parent.id}/messages`)).body.data;
      const result = history[2].content.find((b: { type: string }) => b.type === 'tool_result');
      const content =
        typeof result.content === 'string'
          ? result.content
          : result.content.map((b: { text: string }) => b.text).join('');
      return {
        stopReason: child.stop_reason as string,
        content: content as string,
        isError: result.is_error === true,
      };
    }

    it('a blank prompt: no child, the call answered is_error asking for a prompt', async () => {
      const res = await h.api.post('/v1/sessions', {
        system: 'You are a writer who mumbles.',
        input: 'go',
        tools: [agentTool('researcher', { system: 'You are a researcher who finishes.' })],
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const parent = await h.api.waitFor(res.body.id, (s) => s.status === 'idle', 30_000);
      assert.deepEqual((await h.api.get(`/v1/sessions/${parent.id}/children`)).body.data, []);
      const history = (await h.api.get(`/v1/sessions/${parent.id}/messages`)).body.data;
      const result = history[2].content.find((b: { type: string }) => b.type === 'tool_result');
      assert.deepEqual(
        [result.content, result.is_error],
        ['Error: give the sub-agent a `prompt` (a string, not blank).', true],
      );
    });

    it('a history its client gave, ending with a reply whose calls are unanswered: is_error, not its answer', async () => {
      const res = await h.api.post('/v1/sessions', {
        system: 'You are a writer.',
        input: 'go',
        tools: [
          agentTool('researcher', {
            system: 'You are a researcher who finishes.',
            tools: ['get_weather'],
            pause_after_turn: true,
          }),
        ],
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const child = await until(
        async () => (await h.api.get(`/v1/sessions/${res.body.id}/children`)).body.data[0],
        20_000,
        'the child',
      );
      // The child's first reply (a remark and a call) is under review; its client gives the history back as it is,
      // ending with that reply, whose call is not answered: no stop reason, and the child did not finish.
      await h.api.waitFor(child.id, (s) => s.status === 'requires_action', 20_000);
      const kept = (await h.api.get(`/v1/sessions/${child.id}/messages`)).body.data;
      assert.equal(kept.at(-1).content.at(-1).type, 'tool_use');
      const put = await h.api.req('PUT', `/v1/sessions/${child.id}/messages`, { messages: kept });
      assert.equal(put.status, 200, JSON.stringify(put.body));
      const parent = await h.api.waitFor(res.body.id, (s) => s.status === 'idle', 30_000);
      const history = (await h.api.get(`/v1/sessions/${parent.id}/messages`)).body.data;
      const result = history[2].content.find((b: { type: string }) => b.type === 'tool_result');
      assert.deepEqual(
        [result.content, result.is_error],
        [
          `Error: the sub-agent stopped before it finished (stop_reason null). Its last text: ${INTERIM}`,
          true,
        ],
      );
    });

    it("end_turn: the last reply's text, not an earlier remark, as a success", async () => {
      const r = await delegate('finishes');
      assert.deepEqual(r, { stopReason: 'end_turn', content: 'Sunny, 21°C.', isError: false });
    });

    it("max_iterations after a call alone: is_error, and no earlier turn's remark", async () => {
      const r = await delegate('loops');
      assert.deepEqual(r, {
        stopReason: 'max_iterations',
        content:
          'Error: the sub-agent stopped before it finished (stop_reason max_iterations). It left no text.',
        isError: true,
      });
    });

    it('refusal without text: is_error saying so', async () => {
      const r = await delegate('refuses');
      assert.deepEqual(r, {
        stopReason: 'refusal',
        content: 'Error: the sub-agent stopped before it finished (stop_reason refusal). It left no text.',
        isError: true,
      });
    });

    it('max_tokens: is_error, with the cut text', async () => {
      const r = await delegate('truncates');
      assert.deepEqual(r, {
        stopReason: 'max_tokens',
        content:
          'Error: the sub-agent stopped before it finished (stop_reason max_tokens). Its last text: The weather in Paris is',
        isError: true,
      });
    });

    it('max_tokens with a text past TOOL_RESULT_MAX_BYTES: is_error naming the limit, not the text', async () => {
      const r = await delegate('rambles');
      assert.deepEqual(r, {
        stopReason: 'max_tokens',
        content:
          'Error: the sub-agent stopped before it finished (stop_reason max_tokens). Its last text would make the result 5089 bytes; a tool result may have at most 4096 bytes (TOOL_RESULT_MAX_BYTES).',
        isError: true,
      });
    });

    it("max_tokens with a text under the limit that the error takes past it: the size told is the result's", async () => {
      const r = await delegate('overflows');
      assert.deepEqual(r, {
        stopReason: 'max_tokens',
        content:
          'Error: the sub-agent stopped before it finished (stop_reason max_tokens). Its last text would make the result 4139 bytes; a tool result may have at most 4096 bytes (TOOL_RESULT_MAX_BYTES).',
        isError: true,
      });
    });

    it('a stop reason the service does not know: is_error, with the text', async () => {
      const r = await delegate('surprises');
      assert.deepEqual(r, {
        stopReason: 'a_reason_of_tomorrow',
        content:
          'Error: the sub-agent stopped before it finished (stop_reason a_reason_of_tomorrow). Its last text: Partly',
        isError: true,
      });
    });
  },
);
