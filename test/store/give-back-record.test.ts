/**
 * The format of a delete's record of what it owes its tenant's storage count (keys.ts `giveBack`, written by
 * destroy-11.lua): storage-quota.ts `encodeGiveBack` and `decodeGiveBack` agree, whatever the tenant holds.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { decodeGiveBack, encodeGiveBack } from '../../src/store/storage-quota.js';

describe('a give-back record', () => {
  it('decodes what is encoded, a tenant holding `:` or a newline too', () => {
    for (const r of [
      { bytes: 120, tenant: 'acme' },
      { bytes: 0, tenant: 'a:b:c' },
      { bytes: -5, tenant: 'line\nbreak' },
    ])
      assert.deepEqual(decodeGiveBack(encodeGiveBack(r)), r);
    assert.equal(encodeGiveBack({ bytes: 7, tenant: 't' }), '7:t', 'the form destroy-11.lua writes');
  });

  it('refuses what is not of that form', () => {
    for (const v of ['', 'acme', ':acme', '12:', 'x1:acme', '1.5:acme', `${'9'.repeat(50_000)}x:t`])
      assert.equal(decodeGiveBack(v), null, JSON.stringify(v.slice(0, 20)));
  });
});
