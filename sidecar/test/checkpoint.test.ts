import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CHECKPOINT_FILE, CheckpointStore, writeFileAtomic } from '../delivery/checkpoint.ts';
import { tmpDir } from '../../test/support/sidecar-helpers.ts';

describe('checkpoint', () => {
  it('writes atomically and leaves no temp file behind', async () => {
    const dir = await tmpDir();
    const file = path.join(dir, 'x.json');
    await writeFileAtomic(file, 'one');
    await writeFileAtomic(file, 'two');
    expect(await readFile(file, 'utf8')).toBe('two');
    expect(await readdir(dir)).toEqual(['x.json']);
  });

  it('round-trips entries and resumes them', async () => {
    const dir = await tmpDir();
    const store = new CheckpointStore(dir, 'uid-1');
    await store.init();
    expect((await store.load()).size).toBe(0);
    const entries = new Map([
      ['main/0/abc', { offset: 1234, done: false }],
      ['main/0/def', { offset: 99, done: true }],
    ]);
    await store.save(entries);
    expect(await new CheckpointStore(dir, 'uid-1').load()).toEqual(entries);
  });

  it('keeps the order of concurrent saves', async () => {
    const dir = await tmpDir();
    const store = new CheckpointStore(dir, 'uid-1');
    const saves = [];
    for (let i = 0; i < 20; i++) saves.push(store.save(new Map([['k', { offset: i, done: false }]])));
    await Promise.all(saves);
    expect((await store.load()).get('k')?.offset).toBe(19);
  });

  it('ignores a corrupt checkpoint or one of another pod', async () => {
    const dir = await tmpDir();
    await writeFile(path.join(dir, CHECKPOINT_FILE), '{"version":1,"files":{"a":');
    expect((await new CheckpointStore(dir, 'uid-1').load()).size).toBe(0);
    await new CheckpointStore(dir, 'uid-other').save(new Map([['a', { offset: 5, done: false }]]));
    expect((await new CheckpointStore(dir, 'uid-1').load()).size).toBe(0);
    expect((await new CheckpointStore(dir, 'uid-other').load()).get('a')?.offset).toBe(5);
  });
});
