/**
 * The format of a delete's record of what it owes its tenant (keys.ts `giveBack`, written by destroy-11.lua):
 * storage-quota.ts `encodeGiveBack` and `decodeGiveBack` agree, whatever the tenant holds, with or without a spend
 * open.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { decodeGiveBack, encodeGiveBack } from '../../src/store/storage-quota.js';

const open = { seq: 12, day: '2026-12-06', incr: { in: 1000, out: 100, cw: 10, cr: 20, cost: 4321, nc: 0 } };

describe('a give-back record', () => {
  it('decodes what is encoded, a tenant holding `:`, `;` or a newline too', () => {
    for (const r of [
      { bytes: 120, open: null, tenant: 'acme' },
      { bytes: 0, open, tenant: 'a:b;c' },
      { bytes: -5, open: null, tenant: 'line\nbreak' },
      { bytes: 7, open, tenant: 't' },
    ])
      assert.deepEqual(decodeGiveBack(encodeGiveBack(r)), r);
    // The forms destroy-11.lua writes.
    assert.equal(encodeGiveBack({ bytes: 7, open: null, tenant: 't' }), '7:t');
    assert.equal(encodeGiveBack({ bytes: 7, open, tenant: 't' }), '7;12|2026-12-06|1000,100,10,20,4321,0:t');
  });

  it('refuses what is not of that form; a spend mark that does not decode is none', () => {
    for (const v of ['', 'acme', ':acme', '12:', 'x1:acme', '1.5:acme', `${'9'.repeat(50_000)}x:t`])
      assert.equal(decodeGiveBack(v), null, JSON.stringify(v.slice(0, 20)));
    assert.deepEqual(decodeGiveBack('3;junk:t'), { bytes: 3, open: null, tenant: 't' });
  });
});
