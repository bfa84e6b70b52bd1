import { RE2JS } from 're2js';
const pats: Record<string, string> = {
  iso: String.raw`^\d{4}-\d{2}-\d{2}`,
  isoFull: String.raw`^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s+(?:TRACE|DEBUG|INFO|WARN(?:ING)?|ERROR|FATAL)\b`,
  python: String.raw`^(?:Traceback \(most recent call last\):|  \+ Exception Group Traceback \(most recent call last\):)`,
  java: String.raw`^(?:Exception in thread "|[^\s:]*\.[^\s:]*(?:Exception|Error|Throwable)(?::|$))`,
  go: String.raw`^(?:panic: |fatal error: |goroutine \d+ \[)`,
  nodejs: String.raw`^(?:(?:Uncaught )?[A-Z]?[A-Za-z]*Error(?: \[[A-Z0-9_]+\])?(?::|$)|\S+\.(?:m|c)?[jt]s:\d+$)`,
  syslog: String.raw`^[A-Z][a-z]{2} [ 0-9]\d \d{2}:\d{2}:\d{2} `,
  klog: String.raw`^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}`,
  levelCI: String.raw`(?i)^(?:\S+\s+){0,3}(?:trace|debug|info|warn(?:ing)?|error|fatal|critical)\b`,
  unicodeWord: String.raw`^\p{L}[\p{L}\p{N}_]*: `,
};
let all = '';
for (const [k, p] of Object.entries(pats)) { console.log(k.padEnd(12), RE2JS.compile(p).programSize()); }
const builtins = ['python', 'java', 'go', 'nodejs'].map((k) => `(?:${pats[k]})`).join('|');
console.log('all4'.padEnd(12), RE2JS.compile(builtins).programSize());
console.log('iso+all4'.padEnd(12), RE2JS.compile(`(?:${pats.isoFull})|${builtins}`).programSize());
console.log('everything'.padEnd(12), RE2JS.compile(Object.values(pats).map((p) => `(?:${p})`).join('|')).programSize());
