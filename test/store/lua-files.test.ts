import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import { defineLuaCommands } from '../../src/store/lua-commands.js';
import { startTestRedis } from '../helpers/redis.js';

const SRC = path.join(import.meta.dirname, '../..', 'src');
const files = (readdirSync(SRC, { recursive: true, encoding: 'utf8' }) as string[]).filter((f) =>
  f.endsWith('.lua'),
);

describe('Lua lives in .lua files', () => {
  it('no TypeScript module holds a script', () => {
    for (const f of readdirSync(SRC, { recursive: true, encoding: 'utf8' }) as string[]) {
      if (!f.endsWith('.ts')) continue;
      const text = readFileSync(path.join(SRC, f), 'utf8');
      assert.doesNotMatch(text, /redis\.call\(/, `${f} holds Lua`);
    }
  });

  it('every script has a KEYS/ARGV/returns header and uses no key beyond its <name>-<numkeys>', () => {
    const scripts = files.filter((f) => !f.includes(`includes${path.sep}`));
    assert.ok(scripts.length >= 10);
    for (const f of scripts) {
      const text = readFileSync(path.join(SRC, f), 'utf8');
      const header = text
        .split('\n')
        .filter((l) => l.startsWith('--'))
        .join('\n');
      assert.match(header, /KEYS\[1\]/, `${f}: KEYS in the header`);
      assert.match(header, /ARGV\[1\]/, `${f}: ARGV in the header`);
      assert.match(header, /Returns/, `${f}: what it returns in the header`);
      const numkeys = /-(\d+)\.lua$/.exec(f)?.[1];
      if (numkeys === undefined) continue; // a variadic key list
      const used = [...text.matchAll(/KEYS\[(\d+)\]/g)].map((m) => Number(m[1]));
      assert.ok(Math.max(...used) <= Number(numkeys), `${f} uses KEYS[${Math.max(...used)}]`);
    }
  });

  it('includes are expanded once and the commands run on a real Redis', async (t) => {
    const redis = await startTestRedis();
    t.after(() => redis.stop());
    const client = new Redis(redis.url);
    t.after(() => client.quit());
    const names = defineLuaCommands(client, new URL('../../src/store/lua/', import.meta.url), 'sess');
    assert.deepEqual(names.sort(), [
      'sessAcquire',
      'sessAppendEvents',
      'sessApply',
      'sessClientTokenMint',
      'sessClientTokenRevoke',
      'sessDestroy',
      'sessDueSettle',
      'sessMemoryList',
      'sessMemoryRemove',
      'sessMemoryRename',
      'sessMemoryWrite',
      'sessReadEvents',
      'sessRelease',
      'sessRenew',
      'sessRunSlotPrune',
      'sessRunSlotTake',
    ]);
    // append-events includes the notice: it publishes the events it wrote.
    const sub = new Redis(redis.url);
    t.after(() => sub.quit());
    await sub.subscribe('ev:{x}');
    const got = new Promise<string>((resolve) => sub.once('message', (_c: string, m: string) => resolve(m)));
    const scripted = client as unknown as {
      sessAppendEvents(...a: Array<string | number>): Promise<string>;
    };
    const id = await scripted.sessAppendEvents(
      's:{x}',
      's:{x}:e',
      'ev:{x}',
      100,
      5,
      16384,
      1_000_000,
      'turn.started',
      '{"iteration":1}',
    );
    const notice = (await got).split('\n');
    assert.deepEqual(notice, ['E', '0-0', id, id, 'turn.started', '5', '0', '{"iteration":1}']);
  });
});
