import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cacheMarks, capCacheMarks } from '../../src/engine/cache-breakpoints.js';
import { cacheMarks as apiCount } from '../fake/cache-marks.js';
import type { StoredMessage } from '../../src/history.js';

const mark = { cache_control: { type: 'ephemeral' } };
/** Every `cache_control` key, wherever it is: a count that shares no key list with the code it checks. */
const allMarks = (v: unknown) => (JSON.stringify(v).match(/"cache_control":\{/g) ?? []).length;

describe('cache breakpoints: every marker counted is a marker dropped', () => {
  it('markers under a compaction’s tool_changes, a tool change’s definition, a tool search’s tool_references, a document source', () => {
    const history = [
      {
        role: 'user',
        content: [
          {
            type: 'compaction',
            content: 'Summary.',
            tool_changes: [
              {
                type: 'tool_addition',
                tool: { type: 'tool_definition', definition: { name: 'a', ...mark } },
                ...mark,
              },
              { type: 'tool_removal', tool: { type: 'tool_reference', tool_name: 'b' }, ...mark },
            ],
          },
        ],
      },
      {
        role: 'assistant',
        content: [
          { type: 'server_tool_use', id: 'srvtoolu_1', name: 'tool_search_tool_regex', input: { q: 'x' } },
          {
            type: 'tool_search_tool_result',
            tool_use_id: 'srvtoolu_1',
            content: {
              type: 'tool_search_tool_search_result',
              tool_references: [
                { type: 'tool_reference', tool_name: 'c', ...mark },
                { type: 'tool_reference', tool_name: 'd', ...mark },
              ],
            },
          },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'document', source: { type: 'content', content: [{ type: 'text', text: 'p', ...mark }] } },
          { type: 'text', text: 'Go on.', ...mark },
        ],
      },
    ] as unknown as StoredMessage[];
    const before = JSON.stringify(history);
    assert.equal(allMarks(history), 7);
    assert.equal(cacheMarks(history), 7, 'the service counts each');
    assert.equal(apiCount(history), 7, 'as the fake (the API) does');
    const copy = [...history];
    assert.equal(capCacheMarks(copy, 0), true);
    assert.ok(allMarks(copy) <= 4, `${allMarks(copy)} markers left`);
    assert.equal(allMarks(copy), cacheMarks(copy));
    assert.equal(JSON.stringify(history), before, 'the stored history is not edited');
  });

  it('a tool_use input keeps a key named cache_control: it is the model’s data, not a marker', () => {
    const history = [
      { role: 'user', content: [{ type: 'text', text: 'a', ...mark }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 't', input: { ...mark } }] },
      ...[1, 2, 3, 4].map((i) => ({ role: 'user', content: [{ type: 'text', text: `m${i}`, ...mark }] })),
    ] as unknown as StoredMessage[];
    assert.equal(cacheMarks(history), 5);
    const copy = [...history];
    capCacheMarks(copy, 0);
    assert.equal(cacheMarks(copy), 4);
    assert.deepEqual(copy[1], history[1]);
  });
});
