// The Node examples run as documented.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { FRANCE, MODEL_PATH, PACKAGE_DIR } from './helpers.mjs';

const example = (name, ...args) => spawnSync(process.execPath, [join(PACKAGE_DIR, 'examples', 'node', name), ...args], { encoding: 'utf8' });

test('examples/node/stream.mjs streams the France answer', () => {
  const r = example('stream.mjs', MODEL_PATH);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, `${FRANCE.text}\n`);
});

test('examples/node/chat.mjs streams a chat completion with progress and usage', () => {
  const r = example('chat.mjs', MODEL_PATH, 'Name a fruit.');
  assert.equal(r.status, 0, r.stderr);
  assert.ok(r.stdout.trim().length > 0);
  assert.match(r.stderr, /loading \d+ \/ \d+ MB/);
  assert.match(r.stderr, /\[\d+ prompt \+ \d+ completion tokens\]/);
});
