import { describe, expect, it } from 'vitest';
import { Slots } from '../slots.ts';

const tick = () => new Promise((r) => setImmediate(r));

describe('Slots', () => {
  it('runs at most `size` at once, the rest in the order they came, and gives a slot back when one fails', async () => {
    const slots = new Slots(2);
    const started: number[] = [];
    const release: Array<() => void> = [];
    const runs = [0, 1, 2, 3].map((i) =>
      slots.run(async () => {
        started.push(i);
        await new Promise<void>((r) => release.push(r));
        if (i === 0) throw new Error('boom');
        return i;
      }),
    );
    await tick();
    expect(started).toEqual([0, 1]);
    expect(slots.busy).toBe(2);
    release[0]!();
    await expect(runs[0]).rejects.toThrow('boom');
    await tick();
    expect(started).toEqual([0, 1, 2]);
    release[1]!();
    release[2]!();
    await tick();
    await tick();
    expect(started).toEqual([0, 1, 2, 3]);
    release[3]!();
    expect(await Promise.all(runs.slice(1))).toEqual([1, 2, 3]);
    expect(slots.busy).toBe(0);
  });

  it('rejects a size below 1', () => {
    expect(() => new Slots(0)).toThrow(/at least 1/);
  });
});
