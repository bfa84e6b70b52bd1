// The esbuild options every bundle of the project shares, so that the image's
// bundles (scripts/bundle.mjs) and the kubectl plugin (scripts/plugin.mjs)
// cannot drift apart on the Node version they target or what they keep.
// Imported by the image's build stage too: the Dockerfile and .dockerignore
// copy it next to bundle.mjs.

/** One file per entry point with every dependency inside, for the Node release the project runs on. */
export const NODE_BUNDLE = {
  bundle: true,
  platform: 'node',
  target: 'node24',
  legalComments: 'none',
  logLevel: 'warning',
};

// Some CommonJS dependencies call require(); give the ESM bundle one.
const REQUIRE_BANNER = "import { createRequire as __jhCreateRequire } from 'node:module'; const require = __jhCreateRequire(import.meta.url);";

/** The ESM bundles of the image (webhook and CLI, sidecar, harvester). */
export const ESM_BUNDLE = {
  ...NODE_BUNDLE,
  format: 'esm',
  sourcemap: true,
  banner: { js: REQUIRE_BANNER },
};

/** A program's entry point split into chunks under `dist/<chunkDir>/`, loaded only when used. */
export function splitProgram(name, entry, chunkDir) {
  return {
    ...ESM_BUNDLE,
    entryPoints: { [name]: entry },
    outdir: 'dist',
    outExtension: { '.js': '.mjs' },
    splitting: true,
    chunkNames: `${chunkDir}/[name]-[hash]`,
  };
}
