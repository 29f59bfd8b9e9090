import { it } from 'node:test';
import assert from 'node:assert/strict';

// `npm test` and `.ci/run` run the tests on Node 24 LTS (the `node` devDependency puts its binary first on npm
// scripts' PATH), whatever the machine's system Node is.
it('runs on Node 24', () => {
  assert.match(process.version, /^v24\./);
});
