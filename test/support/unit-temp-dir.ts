// Unit tests make temporary folders freely (mkdtemp under os.tmpdir()); each
// test file gets a folder of its own to make them in, removed once the file
// is done, so that the suite leaves nothing behind in the machine's /tmp.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

const outer = process.env.TMPDIR;
const mine = mkdtempSync(join(tmpdir(), 'jh-unit-'));
// os.tmpdir() reads TMPDIR on every call, and child processes inherit it.
process.env.TMPDIR = mine;

afterAll(() => {
  if (outer === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = outer;
  rmSync(mine, { recursive: true, force: true });
});
