import { readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const GOLDEN_DIR = fileURLToPath(new URL('./', import.meta.url));

export interface GoldenCase {
  name: string;
  input: string;
  output: string;
  /** Flags from a leading `# flags:` comment, as the CLI would take them; a --config path is relative to this folder. */
  flags: Record<string, string>;
}

/** Every test/golden/<case>.yaml with its <case>.injected.yaml, found by listing the folder. */
export function goldenCases(): { cases: GoldenCase[]; orphans: string[] } {
  const files = readdirSync(GOLDEN_DIR).filter((f) => f.endsWith('.yaml'));
  const inputs = files.filter((f) => !f.endsWith('.injected.yaml'));
  const outputs = new Set(files.filter((f) => f.endsWith('.injected.yaml')));
  const cases = inputs.sort().map((f) => {
    const name = basename(f, '.yaml');
    const text = readFileSync(join(GOLDEN_DIR, f), 'utf8');
    return { name, input: join(GOLDEN_DIR, f), output: join(GOLDEN_DIR, `${name}.injected.yaml`), flags: parseFlags(text) };
  });
  for (const c of cases) outputs.delete(basename(c.output));
  return { cases, orphans: [...outputs] };
}

function parseFlags(text: string): Record<string, string> {
  const m = /^# flags:(.*)$/m.exec(text);
  if (!m) return {};
  const words = m[1]!.trim().split(/\s+/).filter(Boolean);
  const flags: Record<string, string> = {};
  for (let i = 0; i < words.length; i += 2) {
    const k = words[i]!;
    const v = words[i + 1];
    if (!k.startsWith('--') || v === undefined) throw new Error(`bad # flags line: ${m[1]}`);
    // Resolved here, so the case does not depend on the directory the tests run in.
    flags[k.slice(2)] = k === '--config' ? join(GOLDEN_DIR, v) : v;
  }
  return flags;
}
