import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ANNOTATIONS } from '../../src/core/annotations.ts';
import { defaultConfig } from '../../src/core/config.ts';
import { SKIP_REASONS } from '../../src/core/decide.ts';
import { ERROR_CODES } from '../../src/core/errors.ts';
import { DOC, render } from '../../scripts/docs.ts';

const doc = readFileSync(DOC, 'utf8');

function configKeys(o: Record<string, unknown>, prefix = ''): string[] {
  return Object.entries(o).flatMap(([k, v]) => {
    const key = prefix + k;
    // resources is one setting, documented as a whole.
    if (v && typeof v === 'object' && !Array.isArray(v) && k !== 'resources') return configKeys(v as Record<string, unknown>, `${key}.`);
    return [key];
  });
}

describe('docs/configuration.md is in step with the code', () => {
  it('has the generated env table up to date (npm run docs:generate)', () => {
    expect(render(doc)).toBe(doc);
  });
  it.each(Object.values(ANNOTATIONS))('documents annotation %s', (a) => {
    expect(doc).toContain(`\`${a}\``);
  });
  it.each(configKeys(defaultConfig() as unknown as Record<string, unknown>))('documents config key %s', (k) => {
    expect(doc).toContain(`| \`${k}\``);
  });
  it.each([...Object.values(SKIP_REASONS), ...Object.values(ERROR_CODES)])('documents code %s', (c) => {
    expect(doc).toContain(`\`${c}\``);
  });
});
