/** `<NAME>_FILE` secrets (Docker and Compose secrets): read from the file, never both, an unreadable file named. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConfigError, loadConfig } from '../../src/config.js';

test('API_KEYS_FILE, ANTHROPIC_API_KEY_FILE and WEBHOOK_SECRET_KEY_FILE are read from their files', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'trs-secrets-'));
  try {
    writeFileSync(path.join(dir, 'keys'), 'acme:key-from-file\n');
    writeFileSync(path.join(dir, 'anthropic'), 'sk-ant-from-file\n');
    const config = loadConfig({
      HOST: '0.0.0.0',
      API_KEYS_FILE: path.join(dir, 'keys'),
      ANTHROPIC_API_KEY_FILE: path.join(dir, 'anthropic'),
    });
    assert.equal(config.API_KEYS?.get('key-from-file'), 'acme');
    assert.equal(config.ANTHROPIC_API_KEY, 'sk-ant-from-file');

    assert.throws(
      () => loadConfig({ API_KEYS: 'a:b', API_KEYS_FILE: path.join(dir, 'keys') }),
      (err: unknown) =>
        err instanceof ConfigError && /API_KEYS_FILE: set API_KEYS or API_KEYS_FILE/.test(err.message),
    );
    assert.throws(
      () => loadConfig({ WEBHOOK_SECRET_KEY_FILE: path.join(dir, 'missing') }),
      (err: unknown) =>
        err instanceof ConfigError && /WEBHOOK_SECRET_KEY_FILE: cannot read .*ENOENT/.test(err.message),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
