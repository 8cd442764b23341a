// docs/clients/node.md's examples: each fenced block preceded by
// <!-- file: PATH --> is byte for byte the file PATH, and the files run
// (from where the tests run, so that they import the installed 'idemd').
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, rmSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

const here = dirname(fileURLToPath(import.meta.url));
const root = process.env.IDEMD_SOURCE_DIR ?? join(here, '..', '..', '..');
const doc = readFileSync(join(root, 'docs', 'clients', 'node.md'), 'utf8');
const blocks = [...doc.matchAll(/<!-- file: (\S+) -->\n```[a-z]*\n([\s\S]*?)```\n/g)].map((m) => [m[1], m[2]]);

test('docs/clients/node.md: every js block is the file it names', () => {
  assert.ok(blocks.length > 0);
  assert.equal((doc.match(/```js\n/g) ?? []).length, blocks.length, 'a js block does not name its file');
  for (const [path, text] of blocks) assert.equal(text, readFileSync(join(root, path), 'utf8'), path);
});

test('docs/clients/node.md: the examples run', () => {
  for (const [path] of blocks) {
    const copy = join(here, '..', `doc-example-${randomBytes(4).toString('hex')}.mjs`);
    writeFileSync(copy, readFileSync(join(root, path)));
    try {
      const out = execFileSync(process.execPath, [copy], {
        env: { ...process.env, EXAMPLE_OPERATION: `doc.${randomBytes(5).toString('hex')}` }, encoding: 'utf8', timeout: 60000,
      });
      const lines = out.trim().split('\n');
      assert.deepEqual(lines.slice(0, 2), ['201 true', '422 fingerprint_mismatch'], out);
      assert.ok(lines.includes('email:evt_3 processed ack'), out);
    } finally {
      rmSync(copy, { force: true });
    }
  }
});
