import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SKIP = new Set(['node_modules', 'dist', '.git', 'bin', 'coverage', '.cache', '.tmp']);

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (SKIP.has(e.name)) return [];
    const p = join(dir, e.name);
    return e.isDirectory() ? markdownFiles(p) : e.name.endsWith('.md') ? [p] : [];
  });
}

/** Relative link targets of one Markdown file, without their #fragment; code spans and blocks left out. */
function relativeLinks(text: string): string[] {
  const prose = text.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => m[1]!)
    .filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t) && !t.startsWith('#'))
    .map((t) => t.split('#')[0]!);
}

describe('links between the documents', () => {
  it('point at files of this repository, so they work in any clone', () => {
    const broken: string[] = [];
    const files = markdownFiles(ROOT);
    for (const file of files) {
      for (const target of relativeLinks(readFileSync(file, 'utf8'))) {
        const to = resolve(dirname(file), target);
        if (relative(ROOT, to).startsWith('..') || !existsSync(to)) broken.push(`${relative(ROOT, file)} → ${target}`);
      }
    }
    expect(files.map((f) => relative(ROOT, f))).toContain('README.md');
    expect(broken).toEqual([]);
  });
});
