// mulberry32: a small seeded generator, for data that must be the same bytes
// on every machine (the benchmark corpus) or that a failure must be able to
// make again from its seed (randomised tests). Not for anything secret.
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}
