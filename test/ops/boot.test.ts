import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { freeLoopbackPort, redisAnswers } from '../../src/redis/embedded.js';
import { buildService, spawnService } from '../helpers/process.js';

describe('boot with an empty environment', () => {
  // The production path: package.json's start command on the compiled JavaScript (what the image runs).
  before(() => buildService());

  it('starts an embedded redis-server and the offline model, ready within 30 s, and stops both on SIGTERM', async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'trs-boot-'));
    // Nothing answers on this port, as on a fresh machine with no Redis running.
    const nobody = await freeLoopbackPort();
    const t0 = Date.now();
    const svc = await spawnService(
      { ANTHROPIC_API_KEY: '', LOCAL_REDIS_URL: `redis://127.0.0.1:${nobody}`, DATA_DIR: dataDir },
      { name: 'fresh', built: true },
    );
    try {
      const ready = await svc.api.get('/readyz');
      assert.equal(ready.status, 200);
      assert.equal(ready.body.model, 'offline');
      assert.ok(Date.now() - t0 < 30_000, `ready after ${Date.now() - t0} ms`);
      // said loudly: a warning at startup
      const warn = svc.logs().find((l) => l['level'] === 40 && /OFFLINE model/.test(String(l['msg'])));
      assert.ok(warn, 'a startup warning names the offline model');
      const embedded = svc.logs().find((l) => /embedded redis-server/.test(String(l['msg'])) && l['redis']);
      assert.ok(embedded, 'an embedded redis-server was started');
      assert.ok(
        (await readdir(path.join(dataDir, 'redis'))).length > 0,
        'its data lives under DATA_DIR/redis',
      );

      // a newcomer's first session is meaningful
      const created = await svc.api.post('/v1/sessions', {
        input: 'What is the weather in Paris?',
        tools: ['get_weather'],
      });
      assert.equal(created.status, 201);
      const done = await svc.api.waitStatus(created.body.id, ['idle', 'failed'], 20_000);
      assert.equal(done.status, 'idle');
      const msgs = (await svc.api.get(`/v1/sessions/${created.body.id}/messages`)).body.data;
      assert.ok(msgs.some((m: any) => m.role === 'assistant' && JSON.stringify(m).includes('get_weather')));
      assert.match(JSON.stringify(msgs.at(-1)), /Paris/);

      const exit = await svc.stop(20_000);
      assert.equal(exit.code, 0);
      assert.equal(
        await redisAnswers(String(embedded['redis']), 500),
        false,
        'the embedded redis-server stopped too',
      );
    } finally {
      if (svc.running()) await svc.kill();
    }
  });

  it('fails fast, naming the variable, when REDIS_URL does not answer or HOST is public without API_KEYS', async () => {
    const dead = await freeLoopbackPort();
    const run = (env: Record<string, string>) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
        env: { PATH: process.env['PATH'], PORT: '0', ...env },
        encoding: 'utf8',
        timeout: 30_000,
      });
    const a = run({ REDIS_URL: `redis://127.0.0.1:${dead}` });
    assert.notEqual(a.status, 0);
    assert.match(a.stderr, /REDIS_URL/);
    const b = run({ HOST: '0.0.0.0' });
    assert.notEqual(b.status, 0);
    assert.match(b.stderr, /API_KEYS/);
  });
});
