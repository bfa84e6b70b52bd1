// Bundles a bench entry point the way scripts/bundle.mjs bundles the image's
// entry points (one ESM file, node24, a require() for CommonJS dependencies),
// so that what a bench measures runs on plain Node as in the image, not
// through tsx's loader.
import { build } from 'esbuild';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

/**
 * Returns the path of the bundled file, in a fresh temporary folder that is
 * removed when this process exits (the bundle is some 11 MB a run).
 */
export async function bundleEntry(entry: string): Promise<string> {
  const outdir = mkdtempSync(join(tmpdir(), 'jobharvest-bench-'));
  process.once('exit', () => rmSync(outdir, { recursive: true, force: true }));
  const outfile = join(outdir, basename(entry).replace(/\.ts$/, '.mjs'));
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    target: 'node24',
    format: 'esm',
    sourcemap: true,
    legalComments: 'none',
    banner: { js: "import { createRequire as __jhCreateRequire } from 'node:module'; const require = __jhCreateRequire(import.meta.url);" },
    logLevel: 'warning',
  });
  return outfile;
}
