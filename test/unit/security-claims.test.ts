// docs/security.md and docs/harvester.md promise what jobharvest does when a
// tenant is hostile. Each promise stands in its page's claims table with the
// test that checks it; this test fails when a claim names no test, names a
// file or a test that does not exist, when a section of either page has no
// claim, or when a row of the threat model cites a claim that is not there.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLAIMS_HEADING = '## Claims and the tests that check them';
/** Sections that are the proofs, not promises. */
const PROOF_SECTIONS: Record<string, readonly string[]> = {
  'docs/security.md': ['threat-model', 'claims-and-the-tests-that-check-them'],
  'docs/harvester.md': ['how-it-is-proven', 'under-a-hostile-log-server-npm-run-benchharvester', 'a-namespace-per-ci-run', 'claims-and-the-tests-that-check-them'],
};

interface Claim {
  id: string;
  section: string;
  tests: Array<{ file: string; name?: string }>;
}

/** GitHub's anchor for a heading. */
function slug(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .trim()
    .replace(/\s/g, '-');
}

function headings(text: string): string[] {
  const prose = text.replace(/```[\s\S]*?```/g, '');
  return [...prose.matchAll(/^#{2,3} (.+)$/gm)].map((m) => slug(m[1]!));
}

function cells(row: string): string[] {
  return row
    .trim()
    .replace(/^\||\|$/g, '')
    .split(/(?<!\\)\|/)
    .map((c) => c.trim());
}

/** The rows of the claims table: claim id, the section it links, the tests it names. */
export function claimsOf(text: string): Claim[] {
  const at = text.indexOf(CLAIMS_HEADING);
  if (at < 0) return [];
  const rows = text
    .slice(at)
    .split('\n')
    .filter((l) => /^\| [A-Z]\d+ \|/.test(l));
  return rows.map((row) => {
    const [id, , section, tests] = cells(row);
    return {
      id: id!,
      section: /\]\(#([^)]+)\)/.exec(section ?? '')?.[1] ?? '',
      tests: (tests ?? '')
        .split(';')
        .map((t) => /`([^`]+\.test\.ts)`(?:\s*›\s*"([^"]+)")?/.exec(t))
        .filter((m): m is RegExpExecArray => m !== null)
        .map((m) => (m[2] === undefined ? { file: m[1]! } : { file: m[1]!, name: m[2] })),
    };
  });
}

const DOCS = ['docs/security.md', 'docs/harvester.md'] as const;
const text = (doc: string) => readFileSync(join(ROOT, doc), 'utf8');

describe.each(DOCS)('%s: every claim names the test that checks it', (doc) => {
  const claims = claimsOf(text(doc));

  it('has a claims table', () => {
    expect(claims.length).toBeGreaterThan(0);
    expect(new Set(claims.map((c) => c.id)).size, 'claim ids are unique').toBe(claims.length);
  });

  it('each claim names at least one test, each file exists and holds the test it names', () => {
    const problems: string[] = [];
    for (const c of claims) {
      if (c.tests.length === 0) problems.push(`${c.id}: names no test`);
      for (const t of c.tests) {
        const path = join(ROOT, t.file);
        if (!existsSync(path)) problems.push(`${c.id}: ${t.file} does not exist`);
        else if (t.name !== undefined && !readFileSync(path, 'utf8').includes(t.name)) problems.push(`${c.id}: no test "${t.name}" in ${t.file}`);
      }
    }
    expect(problems).toEqual([]);
  });

  it('each claim links a section of the page, and each section of the page has a claim', () => {
    const sections = headings(text(doc));
    const linked = new Set(claims.map((c) => c.section));
    expect(claims.filter((c) => !sections.includes(c.section)).map((c) => `${c.id} → #${c.section}`)).toEqual([]);
    // A section nested under one with a claim may share its parent's.
    const skipped = PROOF_SECTIONS[doc]!;
    expect(sections.filter((s) => !skipped.includes(s) && !linked.has(s) && !childOfLinked(text(doc), s, linked))).toEqual([]);
  });
});

/** Whether `section` is an H3 whose H2 a claim links. */
function childOfLinked(page: string, section: string, linked: Set<string>): boolean {
  let parent: string | undefined;
  for (const m of page.replace(/```[\s\S]*?```/g, '').matchAll(/^(#{2,3}) (.+)$/gm)) {
    const s = slug(m[2]!);
    if (m[1] === '##') parent = s;
    else if (s === section) return parent !== undefined && linked.has(parent);
  }
  return false;
}

describe('the threat model of docs/security.md', () => {
  it('cites in each row claims that the claims table has', () => {
    const page = text('docs/security.md');
    const ids = new Set(claimsOf(page).map((c) => c.id));
    const model = page.slice(page.indexOf('## Threat model'), page.indexOf('\n## ', page.indexOf('## Threat model') + 3));
    const rows = model.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| who') && !l.startsWith('|---'));
    expect(rows.length).toBeGreaterThanOrEqual(5);
    const problems: string[] = [];
    for (const row of rows) {
      const cited = cells(row).at(-1)!;
      const refs = [...cited.matchAll(/C(\d+)(?:–C(\d+))?/g)].flatMap((m) => {
        const from = Number(m[1]);
        const to = m[2] === undefined ? from : Number(m[2]);
        return Array.from({ length: to - from + 1 }, (_, i) => `C${from + i}`);
      });
      if (refs.length === 0) problems.push(`${cells(row)[0]}: cites no claim`);
      for (const r of refs) if (!ids.has(r)) problems.push(`${cells(row)[0]}: ${r} is not in the claims table`);
    }
    expect(problems).toEqual([]);
  });

  it('reads a claims table as this test expects (a row without a test is seen as one)', () => {
    const table = `${CLAIMS_HEADING}\n\n| claim | what holds | section | tests |\n|---|---|---|---|\n| C1 | x | [A](#a) | \`test/unit/docs.test.ts\` › "documents" |\n| C2 | y | [B](#b) | none yet |\n`;
    expect(claimsOf(table)).toEqual([
      { id: 'C1', section: 'a', tests: [{ file: 'test/unit/docs.test.ts', name: 'documents' }] },
      { id: 'C2', section: 'b', tests: [] },
    ]);
  });
});
