import { RE2JS } from 're2js';
function rnd(n: number, alpha: string, seed = 1): string { let x = seed; let s = ''; for (let i = 0; i < n; i++) { x = (x * 1103515245 + 12345) & 0x7fffffff; s += alpha[(x >> 8) % alpha.length]; } return s; }
const P = Number(process.argv[2] ?? 1024);
const fams: [string, (n: number) => string, (i: number) => string][] = [
  ['counted', (n) => `[a-z]{1,${n}}[a-z]{1,${n}}b`, (i) => rnd(P - 1, 'acdefghijklmnopqrstuvwxyz', i + 1) + 'b'],
  ['counted-a', (n) => `[a-z]{1,${n}}[a-z]{1,${n}}b`, (i) => 'a'.repeat(P - 1 - i) + 'b'],
  ['dfa-blow', (n) => `[ab]*a[ab]{${n}}c`, (i) => rnd(P - 1, 'ab', i + 1) + 'c'],
  ['dot', (n) => `.{1,${n}}.{1,${n}}!`, (i) => rnd(P - 1, 'xyz', i + 1) + '!'],
  ['unicode', (n) => `\\pL{1,${n}}\\pL{1,${n}}!`, (i) => rnd(P / 2 - 1, 'éü', i + 1) + '!'],
];
for (const [name, mk, line] of fams) {
  for (const n of [25, 50, 125, 250, 500, 1000]) {
    const re = RE2JS.compile(mk(n));
    const times: number[] = [];
    for (let i = 0; i < 12; i++) { const l = line(i); const s = performance.now(); re.test(l); times.push(performance.now() - s); }
    const max = Math.max(...times);
    console.log(name.padEnd(10), 'prog', String(re.programSize()).padStart(5), 'first', times[0]!.toFixed(1), 'max', max.toFixed(1), 'median', times.sort((a, b) => a - b)[6]!.toFixed(1), 'ns/byte/inst(max)', (max * 1e6 / P / re.programSize()).toFixed(1));
  }
}
