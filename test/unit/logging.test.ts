import { describe, expect, it } from 'vitest';
import { batchedStream, redactValue, webhookLogger } from '../../src/http/logging.ts';

describe('redactValue', () => {
  it('returns plain objects and arrays with nothing to redact as they are', () => {
    const fields = { uid: 'u', namespace: 'team-a', name: 'j', ops: 5, dryRun: false, list: ['a', { b: 1 }] };
    expect(redactValue(fields)).toBe(fields);
    const arr = [1, 'x', null];
    expect(redactValue(arr)).toBe(arr);
  });

  it('redacts credentials in nested strings without touching the input', () => {
    const fields = { a: { b: ['ok', 'see https://user:secret@logs.example/x?token=t'] }, c: 'plain' };
    const copy = structuredClone(fields);
    const out = redactValue(fields) as typeof fields;
    expect(JSON.stringify(out)).not.toContain('secret');
    expect(JSON.stringify(out)).not.toContain('token=t');
    expect(out.c).toBe('plain');
    expect(fields).toEqual(copy);
  });

  it('turns an Error or class instance into a plain object of its enumerable fields', () => {
    const err = Object.assign(new Error('https://u:p@x'), { code: 'E1', url: 'https://u:p@host' });
    const out = redactValue(err) as Record<string, unknown>;
    expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
    expect(out).toEqual({ code: 'E1', url: 'https://***@host' });
    class Thing {
      x = 'y';
    }
    expect(redactValue(new Thing())).toEqual({ x: 'y' });
  });

  it('stops at depth 4', () => {
    const deep = { a: { b: { c: { d: { e: { f: 'https://u:p@h' } } } } } };
    expect(redactValue(deep)).toBe(deep);
  });
});

describe('batchedStream', () => {
  it('writes the lines of one event-loop turn with one write, in order', async () => {
    const writes: string[] = [];
    const s = batchedStream({ write: (c: string) => writes.push(c) });
    s.write('a\n');
    s.write('b\n');
    expect(writes).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(writes).toEqual(['a\nb\n']);
    s.write('c\n');
    await new Promise((r) => setImmediate(r));
    expect(writes).toEqual(['a\nb\n', 'c\n']);
  });

  it('writes at once past its size bound, and on flush', () => {
    const writes: string[] = [];
    const s = batchedStream({ write: (c: string) => writes.push(c) }, 4);
    s.write('12');
    s.write('345');
    expect(writes).toEqual(['12345']);
    s.write('6');
    s.flush();
    s.flush();
    expect(writes).toEqual(['12345', '6']);
  });

  it('is what the webhook logger writes to unless given a stream', () => {
    expect(typeof (webhookLogger({ level: 'info' }) as { stream: { write: unknown } }).stream.write).toBe('function');
  });
});
