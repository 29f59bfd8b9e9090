/**
 * A session's delete drops the segments it keeps in keys of their own (`s:{id}:cs:<suffix>`, a compaction of over
 * 1 MiB) in its script, with the rest of its keys. They were UNLINKed by the process after the script answered: a
 * replica killed between the two left them with no expiry, for ever (no stub names them any more, nothing sweeps
 * them). Here a proxy in front of Redis forwards the delete's script and withholds everything after it, and the
 * replica is SIGKILLed there.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { text } from '../fake/script.js';
import { serviceKillSuite } from '../helpers/redis-proxy.js';

/** Three turns of ~400 KiB ('é' is two bytes in UTF-8): a history of 1.2 MB, whose segment gets a key of its own. */
const MESSAGE_BYTES = 400 * 1024;
const TURNS = 3;

describe("a session's delete killed right after its script", { timeout: 180_000 }, () => {
  const { rig, doomed } = serviceKillSuite();

  it('leaves none of its segment keys behind', async () => {
    const replica = await doomed();
    const api = replica.service.api;
    const created = await api.post('/v1/sessions', { start: false, stream: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    for (let n = 1; n <= TURNS; n++) {
      rig.fake.enqueue(text(`Noted ${n}.`));
      const res = await api.post(`/v1/sessions/${id}/messages`, {
        text: `#${n} ${'é'.repeat(MESSAGE_BYTES / 2)}`,
      });
      assert.equal(res.status, 202, JSON.stringify(res.body));
      await api.waitFor(id, (s) => s.status === 'idle' && s.iteration === n, 30_000);
    }
    assert.equal((await api.post(`/v1/sessions/${id}/compact`, {})).status, 202);
    await api.waitFor(id, (s) => s.status === 'idle' && !s.compaction_pending && s.compactions === 1, 30_000);
    const segments = await rig.r.keys(`s:{${id}}:cs:*`);
    assert.equal(segments.length, 1, 'the segment has a key of its own');
    assert.equal(await rig.r.pttl(segments[0]!), -1, 'kept with no expiry');

    // A delete of another session first: Redis has the delete's script, so the delete below is one EVALSHA (its
    // first use would be answered NOSCRIPT, and the EVAL after it withheld).
    const other = (await api.post('/v1/sessions', { start: false })).body.id as string;
    assert.equal((await api.req('DELETE', `/v1/sessions/${other}`)).status, 200);

    // The delete's script carries the key of the deleted session's tenant (`:g`), which nothing before it sends.
    const held = replica.proxy.holdAfter(`s:{${id}}:g`);
    const answered = api.req('DELETE', `/v1/sessions/${id}`).catch(() => null);
    await replica.killWhen(held);
    assert.equal(await answered, null, 'the killed replica answered nothing');
    assert.equal(await rig.r.exists(`s:{${id}}`), 0, 'the delete’s script ran');
    assert.deepEqual(
      (await rig.r.keys(`s:{${id}}:*`)).sort(),
      [`s:{${id}}:b`, `s:{${id}}:e`, `s:{${id}}:g`],
      'only the log, its tenant and the bytes owed its tenant (each with an expiry)',
    );
  });
});
