import js from '@eslint/js';
import { createNodeResolver, importX } from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';

const here = import.meta.dirname;

// Folders whose files no other folder may import: each suite keeps its own
// fixtures, and anything shared lives in test/support/, test/harness/ or
// test/golden/. Everything outside the suite is a target.
const OUTSIDE = (suite) => ['./{src,sidecar,harvester,bench,scripts}/**', `./test/!(${suite})/**`];
const SUITE_ZONES = ['unit', 'integration', 'e2e', 'node'].map((suite) => ({
  target: OUTSIDE(suite),
  from: `./test/${suite}`,
  message: `test/${suite}/ is that suite's own; move what others need to test/support/, test/harness/ or test/golden/.`,
}));
const SIDECAR_TEST_ZONE = {
  target: ['./{src,bench,scripts,test}/**'],
  from: './sidecar/test',
  message: "sidecar/test/ is the sidecar's own; move what others need to test/support/.",
};
// The sidecar ships alone in its own bundle and meets the webhook only through
// the env contract; anything else of src/ would drag webhook code into it.
const SIDECAR_ZONE = {
  target: './sidecar',
  from: './src',
  except: ['./contract'],
  message: 'the sidecar may import only the env contract (src/contract/) from src/.',
};

// The harvester is its own program on the sidecar's engine: it may import the
// engine's front door (sidecar/engine.ts), the contract (src/contract/) and
// the pure core (src/core/: no I/O, so that it tells a missed injection by
// the webhook's own `decide`), never the webhook's server, cluster edge or
// CLI, nor the engine's stages or the sidecar's process. Its tests too: they
// take shared fakes from test/support/.
const HARVESTER_ZONES = [
  {
    target: './harvester',
    from: './src',
    except: ['./contract', './core'],
    message: 'the harvester may import only the contract (src/contract/) and the pure core (src/core/) from src/.',
  },
  {
    target: './harvester',
    from: './sidecar',
    except: ['./engine.ts'],
    message: "the harvester uses the engine through its front door (sidecar/engine.ts) only; shared test fakes live in test/support/.",
  },
];
// Programs never depend on each other: the webhook loads neither the sidecar
// nor the harvester, and the sidecar does not load the harvester.
const PROGRAM_ZONES = [
  { target: './src', from: './sidecar', message: 'the webhook meets the sidecar only through src/contract/.' },
  { target: './src', from: './harvester', message: 'the webhook meets the harvester only through src/contract/: a harvester that crashes must not touch admission.' },
  { target: './sidecar', from: './harvester', message: 'the sidecar is the engine; the harvester builds on it, not the other way round.' },
];

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'test/harness/cluster/bin/', 'coverage/', '.cache/', '.tmp/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // Tests poke at loosely shaped Kubernetes objects; typing every fixture adds noise, not safety.
    files: ['test/**/*.ts', '**/*.test.ts', 'bench/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // Boundaries. Every import names its file with its extension, so plain
    // node resolution finds it; no TypeScript resolver is needed.
    files: ['**/*.{ts,js,mjs}'],
    plugins: { 'import-x': importX },
    settings: {
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.mjs', '.js', '.json'] })],
      'import-x/extensions': ['.ts', '.js', '.mjs'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
    },
    rules: {
      // Packages cannot import back into the project, so their graphs need no walk.
      'import-x/no-cycle': ['error', { ignoreExternal: true }],
      'import-x/no-restricted-paths': ['error', { basePath: here, zones: [...SUITE_ZONES, SIDECAR_TEST_ZONE, ...PROGRAM_ZONES] }],
    },
  },
  {
    // The sidecar's own tests may borrow webhook code (certificates for a fake
    // API server, say): they are not in the bundle.
    files: ['sidecar/**/*.ts'],
    ignores: ['sidecar/test/**', 'sidecar/**/*.test.ts'],
    rules: {
      'import-x/no-restricted-paths': ['error', { basePath: here, zones: [...SUITE_ZONES, SIDECAR_TEST_ZONE, SIDECAR_ZONE, ...PROGRAM_ZONES] }],
    },
  },
  {
    files: ['harvester/**/*.ts'],
    rules: {
      'import-x/no-restricted-paths': ['error', { basePath: here, zones: [...SUITE_ZONES, SIDECAR_TEST_ZONE, ...HARVESTER_ZONES, ...PROGRAM_ZONES] }],
    },
  },
);
