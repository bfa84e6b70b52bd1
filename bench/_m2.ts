import { RE2JS } from 're2js';
function t(re: RE2JS, line: string, reps = 3): number {
  re.test(line);
  let best = Infinity;
  for (let i = 0; i < reps; i++) { const s = performance.now(); re.test(line); best = Math.min(best, performance.now() - s); }
  return best;
}
function rnd(n: number, alpha: string, seed = 1): string { let x = seed; let s = ''; for (let i = 0; i < n; i++) { x = (x * 1103515245 + 12345) & 0x7fffffff; s += alpha[x % alpha.length]; } return s; }
const P = Number(process.argv[2] ?? 1024);
const fams: [string, (n: number) => string, string][] = [
  ['counted', (n) => `[a-z]{1,${n}}[a-z]{1,${n}}b`, 'a'.repeat(P - 1) + 'b'],
  ['counted-nob', (n) => `[a-z]{1,${n}}[a-z]{1,${n}}b|x`, 'a'.repeat(P)],
  ['dfa-blow', (n) => `[ab]*a[ab]{${n}}c`, rnd(P - 1, 'ab') + 'c'],
  ['dot', (n) => `.{1,${n}}.{1,${n}}!`, 'z'.repeat(P - 1) + '!'],
  ['fold', (n) => `(?i)(?:k|s){1,${n}}(?:k|s){1,${n}}!`, 'k'.repeat(P - 1) + '!'],
  ['unicode', (n) => `\\pL{1,${n}}\\pL{1,${n}}!`, 'é'.repeat(P / 2 - 1) + '!'],
];
for (const [name, mk, line] of fams) {
  for (const n of [10, 25, 50, 125, 250, 500, 1000]) {
    const re = RE2JS.compile(mk(n));
    const ms = t(re, line);
    console.log(name.padEnd(12), 'n', String(n).padStart(4), 'prog', String(re.programSize()).padStart(5), 'ms', ms.toFixed(2), 'ns/byte/inst', (ms * 1e6 / P / re.programSize()).toFixed(1));
  }
}
