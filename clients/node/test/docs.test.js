// docs/clients/node.md's examples: each fenced block preceded by
// <!-- file: PATH --> is byte for byte the file PATH, and the files run
// (from where the tests run, so that they import the installed 'idemd')
// and print what the page's <!-- output --> block after them shows. They
// run on an idemd set up as the quick start leaves it: order.create guards
// orders:{subject}.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { client } from './env.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = process.env.IDEMD_SOURCE_DIR ?? join(here, '..', '..', '..');
const doc = readFileSync(join(root, 'docs', 'clients', 'node.md'), 'utf8');
const blocks = [...doc.matchAll(/<!-- file: (\S+) -->\n```[a-z]*\n([\s\S]*?)```\n(?:\n[^<`\n][^\n]*)*\n*(?:<!-- output -->\n```text\n([\s\S]*?)```\n)?/g)]
  .map((m) => [m[1], m[2], m[3]]);

test('docs/clients/node.md: every js block is the file it names', () => {
  assert.ok(blocks.length > 0);
  assert.equal((doc.match(/```js\n/g) ?? []).length, blocks.length, 'a js block does not name its file');
  for (const [path, text] of blocks) assert.equal(text, readFileSync(join(root, path), 'utf8'), path);
});

test('docs/clients/node.md: the examples run and print what the page shows', async () => {
  await client().putOperation('order.create', { token_ttl_seconds: 3600, retention_seconds: 86400,
    lease_seconds: 30, version_key: 'orders:{subject}' });
  for (const [path, , expected] of blocks) {
    assert.ok(expected, `${path}: no <!-- output --> block after it`);
    const copy = join(here, '..', `doc-example-${randomBytes(4).toString('hex')}.mjs`);
    writeFileSync(copy, readFileSync(join(root, path)));
    try {
      const out = execFileSync(process.execPath, [copy], {
        env: { ...process.env, EXAMPLE_OPERATION: `doc.${randomBytes(5).toString('hex')}` }, encoding: 'utf8', timeout: 60000,
      });
      const lines = (s) => s.trim().split('\n').map((l) => l.trimEnd());
      assert.deepEqual(lines(out), lines(expected), path);
    } finally {
      rmSync(copy, { force: true });
    }
  }
});
