import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** Static imports (type-only ones too) of one file, as absolute paths. Dynamic import() is how a cycle is broken on purpose. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^(?:import|export)\s[^;]*?\sfrom\s+'(\.[^']+)'/gms)].map((m) => resolve(dirname(file), m[1]!));
}

function findCycle(graph: Map<string, string[]>): string[] | undefined {
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (f: string): string[] | undefined => {
    if (state.get(f) === 'done') return undefined;
    if (state.get(f) === 'open') return [...stack.slice(stack.indexOf(f)), f];
    state.set(f, 'open');
    stack.push(f);
    for (const g of graph.get(f) ?? []) {
      const c = visit(g);
      if (c) return c;
    }
    stack.pop();
    state.set(f, 'done');
    return undefined;
  };
  for (const f of graph.keys()) {
    const c = visit(f);
    if (c) return c;
  }
  return undefined;
}

describe('src/ module graph', () => {
  it('finds a cycle when there is one', () => {
    expect(findCycle(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']]]))).toEqual(['a', 'b', 'c', 'a']);
  });
  it('has no import cycles', () => {
    const graph = new Map(sources(SRC).map((f) => [f, importsOf(f)]));
    expect(graph.size).toBeGreaterThan(20);
    const cycle = findCycle(graph)?.map((f) => relative(SRC, f));
    expect(cycle, `import cycle: ${cycle?.join(' → ')}`).toBeUndefined();
  });
});

/** Every import of one file, static or dynamic, as absolute paths. */
function allImportsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found = [...text.matchAll(/(?:\sfrom\s+|import\(\s*)'(\.[^']+)'/g)].map((m) => resolve(dirname(file), m[1]!));
  return found;
}

describe('programs depend on shared layers, never on each other', () => {
  const ROOT = fileURLToPath(new URL('../../', import.meta.url));
  const files = (dir: string) => sources(join(ROOT, dir)).filter((f) => !f.includes('/test/'));
  const under = (f: string, dir: string) => f.startsWith(join(ROOT, dir) + '/');

  it('the webhook (src/) imports nothing of the sidecar or the harvester, not even lazily', () => {
    const bad = files('src').flatMap((f) => allImportsOf(f).filter((i) => under(i, 'sidecar') || under(i, 'harvester')).map((i) => `${relative(ROOT, f)} → ${relative(ROOT, i)}`));
    expect(bad).toEqual([]);
  });

  it('the sidecar takes only the contract from src/, the harvester only the contract and the pure core, and the sidecar nothing of the harvester', () => {
    // The harvester runs the webhook's own decide to tell a missed injection;
    // the core is pure (next test), so it loads none of the webhook's server or edge.
    const allowed = (f: string, i: string) => under(i, 'src/contract') || (under(f, 'harvester') && under(i, 'src/core'));
    const bad = [...files('sidecar'), ...files('harvester')].flatMap((f) =>
      allImportsOf(f)
        .filter((i) => (under(i, 'src') && !allowed(f, i)) || (under(f, 'sidecar') && under(i, 'harvester')))
        .map((i) => `${relative(ROOT, f)} → ${relative(ROOT, i)}`),
    );
    expect(files('harvester').length).toBeGreaterThan(5);
    expect(bad).toEqual([]);
  });

  it('the core (src/core/) imports nothing of src/ beyond itself and the contract: the harvester loads no webhook I/O through it', () => {
    const bad = files('src/core').flatMap((f) =>
      allImportsOf(f)
        .filter((i) => !under(i, 'src/core') && !under(i, 'src/contract'))
        .map((i) => `${relative(ROOT, f)} → ${relative(ROOT, i)}`),
    );
    expect(files('src/core').length).toBeGreaterThan(5);
    expect(bad).toEqual([]);
  });

  it('the harvester has no import cycles', () => {
    const graph = new Map(files('harvester').map((f) => [f, importsOf(f)]));
    const cycle = findCycle(graph)?.map((f) => relative(ROOT, f));
    expect(cycle, `import cycle: ${cycle?.join(' → ')}`).toBeUndefined();
  });
});

describe("the sidecar's layers (sidecar/README.md: imports go one way, down the list)", () => {
  const ROOT = fileURLToPath(new URL('../../sidecar/', import.meta.url));
  // Lowest first; a file may import its own layer and those above it in this list.
  const LAYERS: readonly (readonly string[])[] = [
    ['records/', 'encode/', 'config.ts', 'shaping-settings.ts', 'log.ts', 'stats.ts', 'outcome.ts'],
    ['delivery/'],
    ['sinks/'],
    ['sources/'],
    ['shape/'],
    ['pipeline.ts', 'engine.ts', 'termination.ts', 'metrics.ts'],
    ['run.ts', 'main.ts', 'signals.ts', 'started.ts'],
  ];
  const files = sources(ROOT).filter((f) => !f.includes('/test/'));
  const layerOf = (f: string): number => {
    const rel = relative(ROOT, f);
    return LAYERS.findIndex((layer) => layer.some((p) => (p.endsWith('/') ? rel.startsWith(p) : rel === p)));
  };
  /** Imports from a lower layer up to a higher one, static or lazy. */
  const arrowsUp = (graph: Map<string, string[]>) =>
    [...graph].flatMap(([f, imports]) => imports.filter((i) => i.startsWith(ROOT) && layerOf(i) > layerOf(f)).map((i) => `${relative(ROOT, f)} → ${relative(ROOT, i)}`));

  it('every file of the sidecar has a layer', () => {
    expect(files.length).toBeGreaterThan(40);
    expect(files.filter((f) => layerOf(f) < 0).map((f) => relative(ROOT, f))).toEqual([]);
  });

  it('no import points back up, and encode/ never imports shape/', () => {
    const graph = new Map(files.map((f) => [f, allImportsOf(f)]));
    expect(arrowsUp(graph)).toEqual([]);
    const encodeToShape = files.filter((f) => relative(ROOT, f).startsWith('encode/')).flatMap((f) => allImportsOf(f).filter((i) => relative(ROOT, i).startsWith('shape/')));
    expect(encodeToShape).toEqual([]);
  });

  it('an import back up is found', () => {
    const pipeline = join(ROOT, 'pipeline.ts');
    const batcher = join(ROOT, 'delivery/batcher.ts');
    expect(arrowsUp(new Map([[batcher, [pipeline]]]))).toEqual(['delivery/batcher.ts → pipeline.ts']);
  });

  it('has no import cycles', () => {
    const graph = new Map(files.map((f) => [f, importsOf(f)]));
    const cycle = findCycle(graph)?.map((f) => relative(ROOT, f));
    expect(cycle, `import cycle: ${cycle?.join(' → ')}`).toBeUndefined();
  });
});
