/**
 * ANTHROPIC_PROVIDER (contract §7.5): the engine's core flows through each SDK client — `Anthropic`,
 * `AnthropicBedrock` (SigV4 with dummy keys), `AnthropicVertex` (a static OAuth token) — against the fake on that
 * provider's own wire (test/fake/provider-wires.ts): create → tool turns → approval → follow-up → compaction →
 * completed, streamed and not, with the raw stream events relayed.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AnthropicBedrock } from '@anthropic-ai/bedrock-sdk';
import { AnthropicVertex } from '@anthropic-ai/vertex-sdk';
import { EventStreamCodec } from '@smithy/eventstream-codec';
import { OAuth2Client } from 'google-auth-library';
import { ConfigError, loadConfig } from '../../src/config.js';
import {
  COMPACTION_BETA,
  startFakeAnthropic,
  text,
  toolCall,
  type FakeAnthropic,
  type FakeRequest,
} from '../fake/server.js';
import { startHarness, type Harness } from '../helpers/service.js';

type Provider = 'anthropic' | 'bedrock' | 'vertex';

const PROJECT = 'test-project';
const envOf = (provider: Provider, fakeUrl: string): Record<string, string> =>
  provider === 'bedrock'
    ? {
        ANTHROPIC_PROVIDER: 'bedrock',
        AWS_REGION: 'us-east-1',
        ANTHROPIC_BEDROCK_BASE_URL: fakeUrl,
        AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE',
        AWS_SECRET_ACCESS_KEY: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
      }
    : provider === 'vertex'
      ? {
          ANTHROPIC_PROVIDER: 'vertex',
          CLOUD_ML_REGION: 'us-east5',
          ANTHROPIC_VERTEX_PROJECT_ID: PROJECT,
          // As Google's default, `https://<region>-aiplatform.googleapis.com/v1`, has it.
          ANTHROPIC_VERTEX_BASE_URL: `${fakeUrl}/v1`,
          ANTHROPIC_VERTEX_ACCESS_TOKEN: 'ya29.test-token',
        }
      : {};

/** The request went on `provider`'s wire, shaped and signed as that wire wants. */
function assertWire(provider: Provider, r: FakeRequest, model: string, stream: boolean) {
  assert.equal(r.wire, provider);
  assert.equal(r.body.model, model, 'the fake hands the model from the URL on');
  if (provider === 'anthropic') {
    assert.equal(r.path, '/v1/messages');
    assert.ok(
      r.headers['x-api-key'] === 'test-key' || r.headers['authorization'] === 'Bearer test-key',
      'the API key',
    );
    return;
  }
  const wire = JSON.parse(JSON.stringify(r.headers)) as Record<string, string>;
  assert.equal(wire['x-api-key'], undefined, 'no first-party key on a cloud wire');
  if (provider === 'bedrock') {
    assert.equal(r.path, `/model/${model}/${stream ? 'invoke-with-response-stream' : 'invoke'}`);
    assert.match(
      wire['authorization']!,
      /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/us-east-1\/bedrock\/aws4_request, ?SignedHeaders=[^,]*host[^,]*, ?Signature=[0-9a-f]{64}$/,
    );
    assert.match(wire['x-amz-date']!, /^\d{8}T\d{6}Z$/);
  } else {
    assert.equal(
      r.path,
      `/v1/projects/${PROJECT}/locations/us-east5/publishers/anthropic/models/${model}:${stream ? 'streamRawPredict' : 'rawPredict'}`,
    );
    assert.equal(wire['authorization'], 'Bearer ya29.test-token');
  }
}

for (const provider of ['anthropic', 'bedrock', 'vertex'] as const) {
  describe(`ANTHROPIC_PROVIDER=${provider}: the engine's core flows on its wire`, () => {
    let h: Harness;
    let fake: FakeAnthropic;
    before(async () => {
      fake = await startFakeAnthropic({ strictAlternation: true });
      h = await startHarness({ fakeServer: fake, env: envOf(provider, fake.url) });
    });
    after(async () => {
      await h.close();
      await fake.close();
    });
    beforeEach(() => fake.reset());

    const model = provider === 'bedrock' ? 'anthropic.claude-test-1-20260101-v1:0' : 'claude-test-1';

    for (const stream of [true, false]) {
      it(`tool turns, an approval, a follow-up, a compaction, a follow-up from the summary (stream: ${stream})`, async () => {
        const ready = await h.api.get('/readyz');
        if (ready.status === 200) assert.equal(ready.body.model, provider);
        fake.enqueue(
          toolCall('calculate_sum', { a: 2, b: 3 }),
          toolCall('get_weather', { location: 'Paris' }),
          text('5, and sunny in Paris.'),
        );
        const created = await h.api.post('/v1/sessions', {
          model,
          input: 'Sum 2 and 3, then the weather in Paris.',
          tools: ['calculate_sum', 'get_weather'],
          approval: ['get_weather'],
          stream,
        });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        const id = created.body.id;
        const waiting = await h.api.waitStatus(id, ['requires_action', 'idle', 'failed']);
        assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting.error));
        const call = waiting.required_action.tool_calls[0];
        assert.equal(call.name, 'get_weather');
        const d = await h.api.post(`/v1/sessions/${id}/tool-calls/${call.id}`, { decision: 'approve' });
        assert.equal(d.status, 202, JSON.stringify(d.body));
        const done = await h.api.waitStatus(id, ['idle', 'failed']);
        assert.equal(done.status, 'idle', JSON.stringify(done.error));
        assert.equal(done.stop_reason, 'end_turn');
        assert.equal(done.iteration, 3);
        assert.equal(fake.requests.length, 3);
        for (const r of fake.requests) assertWire(provider, r, model, stream);
        // The tools ran between the turns: the model saw both results.
        const third = fake.requests[2]!.messages;
        assert.match(JSON.stringify(third), /"content":"5"/);
        assert.match(JSON.stringify(third.at(-1)), /Paris/);
        const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
        assert.deepEqual(history.slice(0, -1), third);
        // Threads exist on the first-party API only: the cloud clients send the whole history every turn.
        if (provider === 'anthropic') assert.equal(fake.requests[2]!.body.thread?.type, 'continue');
        else {
          assert.equal(fake.requests[2]!.body.thread, undefined);
          assert.equal(fake.requests[2]!.body.messages.length, 5);
        }
        const iters = (await h.api.get(`/v1/sessions/${id}/iterations`)).body.data;
        assert.equal(iters.length, 3);
        for (const it of iters) assert.ok(it.usage.input_tokens > 0 && it.usage.output_tokens > 0);

        // The raw stream events of each turn, relayed as the SDK read them (from Bedrock's binary frames too).
        const events = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as Array<{
          type: string;
          data: any;
        }>;
        const raw = events.filter((e) => e.type === 'stream.event').map((e) => e.data.event.type);
        if (stream) {
          assert.equal(raw.filter((t) => t === 'message_start').length, 3);
          assert.equal(raw.filter((t) => t === 'message_stop').length, 3);
          const deltas = events
            .filter((e) => e.type === 'stream.event' && e.data.event.type === 'content_block_delta')
            .map((e) => e.data.event.delta.text ?? '')
            .join('');
          assert.ok(deltas.includes('5, and sunny in Paris.'), deltas);
        } else assert.equal(raw.length, 0);

        // A follow-up.
        fake.enqueue(text('Anything else?'));
        const m = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Thanks.' });
        assert.equal(m.status, 202, JSON.stringify(m.body));
        const again = await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 4);
        assert.equal(again.stop_reason, 'end_turn');
        assert.equal(fake.requests.length, 4);
        assertWire(provider, fake.requests[3]!, model, stream);
        assert.match(JSON.stringify(fake.requests[3]!.messages.at(-1)!.content), /Thanks\./);

        // A compaction (the SDK's `compactBeforeNextTurn`), its beta in the body on Bedrock.
        const c = await h.api.post(`/v1/sessions/${id}/compact`, { instructions: 'Keep the numbers.' });
        assert.equal(c.status, 202, JSON.stringify(c.body));
        const compacted = await h.api.waitFor(id, (s) => s.status === 'idle' && !s.compaction_pending);
        assert.equal(fake.requests.length, 5);
        const summarize = fake.requests[4]!;
        assertWire(provider, summarize, model, stream);
        assert.deepEqual(summarize.body.compaction, { type: 'summarize', instructions: 'Keep the numbers.' });
        assert.ok(String(summarize.headers['anthropic-beta']).includes(COMPACTION_BETA));
        const after = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
        assert.equal(after.length, 1);
        assert.equal(after[0].content[0].type, 'compaction');

        // The next message is answered from the summary.
        fake.enqueue(text('Still 5.'));
        const m2 = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And the sum?' });
        assert.equal(m2.status, 202);
        const last = await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration > compacted.iteration);
        assert.equal(last.status, 'idle');
        const req = fake.requests.at(-1)!;
        assertWire(provider, req, model, stream);
        assert.equal((req.messages[0]!.content as Array<{ type: string }>)[0]!.type, 'compaction');
      });
    }

    it('an overloaded answer is retried by the SDK on this wire', async () => {
      fake.enqueue({ type: 'error', status: 529, errorType: 'overloaded_error' }, text('after the retry'));
      const s = await h.api.post('/v1/sessions', { model, input: 'Hello', stream: true });
      assert.equal(s.status, 201);
      const done = await h.api.waitStatus(s.body.id, ['idle', 'failed']);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      assert.equal(fake.requests.length, 2);
      assert.equal(fake.requests[0]!.status, 529);
      const msgs = (await h.api.get(`/v1/sessions/${s.body.id}/messages`)).body.data;
      assert.equal(msgs.at(-1).content[0].text, 'after the retry');
    });
  });
}

describe('the fake on the cloud wires, through the SDK clients directly', () => {
  let fake: FakeAnthropic;
  before(async () => {
    fake = await startFakeAnthropic();
  });
  after(async () => fake.close());
  beforeEach(() => fake.reset());

  const bedrock = () =>
    new AnthropicBedrock({
      awsRegion: 'us-west-2',
      baseURL: fake.url,
      apiKey: null,
      maxRetries: 0,
      awsAccessKey: 'AKIDEXAMPLE',
      awsSecretKey: 'secret',
    });
  const vertexAuth = () => {
    const c = new OAuth2Client();
    c.setCredentials({ access_token: 'tok' });
    return c;
  };

  it('Bedrock: the body carries anthropic_version and anthropic_beta, neither model nor stream; the stream arrives as event-stream frames', async () => {
    fake.enqueue(text('Hello from Bedrock.'));
    const stream = bedrock().beta.messages.stream({
      model: 'anthropic.claude-x',
      max_tokens: 64,
      betas: [COMPACTION_BETA],
      messages: [{ role: 'user', content: 'Hi' }],
    });
    const texts: string[] = [];
    stream.on('text', (t) => texts.push(t));
    const final = await stream.finalMessage();
    assert.equal(texts.join(''), 'Hello from Bedrock.');
    assert.equal(final.content[0]!.type === 'text' && final.content[0]!.text, 'Hello from Bedrock.');
    const [r] = fake.requests;
    assert.equal(r!.path, '/model/anthropic.claude-x/invoke-with-response-stream');
    assert.equal(r!.stream, true);
    assert.match(String(r!.headers['anthropic-beta']), new RegExp(COMPACTION_BETA));

    // On the wire: AWS event-stream frames, each a `chunk` whose payload is {"bytes": base64(the event's JSON)}.
    fake.enqueue(text('Framed.'));
    const res = await fetch(`${fake.url}/model/m/invoke-with-response-stream`, {
      method: 'POST',
      headers: { authorization: 'Bearer bedrock-api-key', 'content-type': 'application/json' },
      body: JSON.stringify({
        anthropic_version: 'bedrock-2023-05-31',
        max_tokens: 16,
        messages: [{ role: 'user', content: 'x' }],
      }),
    });
    assert.equal(res.headers.get('content-type'), 'application/vnd.amazon.eventstream');
    const codec = new EventStreamCodec(
      (b) => new TextDecoder().decode(b),
      (t) => new TextEncoder().encode(t),
    );
    const bytes = Buffer.from(await res.arrayBuffer());
    const types: string[] = [];
    // Each frame starts with its total length (4 bytes, big-endian).
    for (let at = 0; at < bytes.length; at += bytes.readUInt32BE(at)) {
      const frame = codec.decode(bytes.subarray(at, at + bytes.readUInt32BE(at)));
      assert.equal(frame.headers[':event-type']?.value, 'chunk');
      assert.equal(frame.headers[':message-type']?.value, 'event');
      const payload = JSON.parse(new TextDecoder().decode(frame.body)) as { bytes: string };
      types.push(
        (JSON.parse(Buffer.from(payload.bytes, 'base64').toString('utf8')) as { type: string }).type,
      );
    }
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');
    assert.ok(types.includes('content_block_delta'));
  });

  it('Bedrock and Vertex refuse a request without their credentials, and a body in the first-party shape', async () => {
    const res = await fetch(`${fake.url}/model/m/invoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ anthropic_version: 'bedrock-2023-05-31', max_tokens: 1, messages: [] }),
    });
    assert.equal(res.status, 403);
    const signed = { authorization: 'Bearer bedrock-api-key', 'content-type': 'application/json' };
    const withModel = await fetch(`${fake.url}/model/m/invoke`, {
      method: 'POST',
      headers: signed,
      body: JSON.stringify({
        model: 'm',
        anthropic_version: 'bedrock-2023-05-31',
        max_tokens: 1,
        messages: [{ role: 'user', content: 'x' }],
      }),
    });
    assert.equal(withModel.status, 400);
    assert.match(await withModel.text(), /model: not allowed/);
    const vertexPath = `${fake.url}/v1/projects/p/locations/global/publishers/anthropic/models/m:rawPredict`;
    const noToken = await fetch(vertexPath, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ anthropic_version: 'vertex-2023-10-16', max_tokens: 1, messages: [] }),
    });
    assert.equal(noToken.status, 401);
    const noVersion = await fetch(vertexPath, {
      method: 'POST',
      headers: { authorization: 'Bearer t', 'content-type': 'application/json' },
      body: JSON.stringify({ max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    });
    assert.equal(noVersion.status, 400);
    assert.match(await noVersion.text(), /anthropic_version/);
  });

  it('Vertex: the SDK client reaches :rawPredict and :streamRawPredict; the cache_control limit holds on this wire', async () => {
    const client = new AnthropicVertex({
      region: 'global',
      projectId: 'p1',
      baseURL: `${fake.url}/v1`,
      authClient: vertexAuth(),
      maxRetries: 0,
    });
    fake.enqueue(text('one'));
    const one = await client.messages.create({
      model: 'claude-x@20250101',
      max_tokens: 16,
      messages: [{ role: 'user', content: 'Hi' }],
    });
    assert.equal(one.content[0]!.type === 'text' && one.content[0]!.text, 'one');
    assert.equal(
      fake.requests[0]!.path,
      '/v1/projects/p1/locations/global/publishers/anthropic/models/claude-x@20250101:rawPredict',
    );
    const mark = { type: 'ephemeral' } as const;
    const marked = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ type: 'text' as const, text: `p${i}`, cache_control: mark }));
    await assert.rejects(
      client.messages.create({
        model: 'claude-x',
        max_tokens: 16,
        messages: [{ role: 'user', content: marked(5) }],
      }),
      (err: Error) => /maximum of 4 blocks with cache_control/.test(err.message),
    );
    fake.enqueue(text('streamed'));
    const s = client.messages.stream({
      model: 'claude-x',
      max_tokens: 16,
      messages: [{ role: 'user', content: 'Hi' }],
    });
    assert.equal(await s.finalText(), 'streamed');
    assert.match(fake.requests.at(-1)!.path!, /:streamRawPredict$/);
  });
});

describe('ANTHROPIC_PROVIDER config', () => {
  const base = { HOST: '127.0.0.1' };
  it('refuses a cloud provider without its region or project, and half a key pair, naming the variables', () => {
    assert.throws(
      () => loadConfig({ ...base, ANTHROPIC_PROVIDER: 'bedrock' }),
      (err: Error) =>
        err instanceof ConfigError &&
        /AWS_REGION: required when ANTHROPIC_PROVIDER=bedrock/.test(err.message),
    );
    assert.throws(
      () =>
        loadConfig({
          ...base,
          ANTHROPIC_PROVIDER: 'bedrock',
          AWS_REGION: 'us-east-1',
          AWS_ACCESS_KEY_ID: 'A',
        }),
      (err: Error) => err instanceof ConfigError && /set both or neither/.test(err.message),
    );
    assert.throws(
      () => loadConfig({ ...base, ANTHROPIC_PROVIDER: 'vertex', CLOUD_ML_REGION: 'us-east5' }),
      (err: Error) => err instanceof ConfigError && /ANTHROPIC_VERTEX_PROJECT_ID: required/.test(err.message),
    );
    assert.throws(
      () => loadConfig({ ...base, ANTHROPIC_PROVIDER: 'azure' }),
      (err: Error) => err instanceof ConfigError && /ANTHROPIC_PROVIDER/.test(err.message),
    );
    const ok = loadConfig({
      ...base,
      ANTHROPIC_PROVIDER: 'vertex',
      CLOUD_ML_REGION: 'global',
      ANTHROPIC_VERTEX_PROJECT_ID: 'p',
    });
    assert.equal(ok.ANTHROPIC_PROVIDER, 'vertex');
  });
});
