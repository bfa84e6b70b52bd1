// Bundles each entry point into one ESM file so the image needs no node_modules
// and the sidecar starts without resolving hundreds of files.
import { build } from 'esbuild';
import { chmodSync, writeFileSync } from 'node:fs';
import { splitProgram } from './esbuild-options.mjs';

// Split so that `jobharvest inject` does not parse the Kubernetes client and
// the HTTP server it never uses: those chunks load only for `webhook`.
const cli = splitProgram('jobharvest', 'src/cli/main.ts', 'chunks');
await build({ ...cli, banner: { js: '#!/usr/bin/env node\n' + cli.banner.js } });
// An ESM import of node:http or node:https makes Node build the module's ESM
// facade, which reads every export, lazy getters included: node:http's
// WebSocket ones then load undici, ~30 ms of CPU and ~13 MiB at every sidecar
// start for a client it never uses. Through the bundle's require() the module
// is read only where it is used. Type-only imports are erased before this.
const requireHttpModules = {
  name: 'require-http-modules',
  setup(b) {
    b.onResolve({ filter: /^node:https?$/ }, (args) => (args.kind === 'require-call' ? undefined : { path: args.path, namespace: 'require-http-modules' }));
    b.onLoad({ filter: /.*/, namespace: 'require-http-modules' }, (args) => ({ contents: `module.exports = require(${JSON.stringify(args.path)});`, loader: 'js' }));
  },
};

// The sidecar splits too: each sink (the OTLP encoder above all) and the
// metrics client are chunks that load only when the pod's settings pick them.
// Its entry point holds nothing but the SIGTERM latch (sidecar/main.ts).
await build({ ...splitProgram('sidecar', 'sidecar/main.ts', 'sidecar-chunks'), plugins: [requireHttpModules] });

// The harvester is its own program (its own Deployment), bundled apart so the
// webhook's bundle never holds any of it. It runs the sidecar's engine, so the
// same http/https rule applies.
await build({ ...splitProgram('harvester', 'harvester/entry.ts', 'harvester-chunks'), plugins: [requireHttpModules] });

// `npx jobharvest` runs the bin directly: it must be executable.
chmodSync('dist/jobharvest.mjs', 0o755);

// kubectl finds a plugin by its exact file name on PATH, extension and all, so
// `kubectl jobharvest logs` needs an executable named kubectl-jobharvest. It
// follows its own symlink (npm links bins), then runs the bundled CLI.
writeFileSync(
  'dist/kubectl-jobharvest',
  '#!/bin/sh\nexec node "$(dirname "$(readlink -f "$0")")/jobharvest.mjs" "$@"\n',
  { mode: 0o755 },
);
