/**
 * Re-records test/golden/skew/<version>/ from the commit the version was
 * released from (releases.json), with that release's own code:
 *
 *   npm run golden:skew -- 0.1.0
 *
 * The release is built by test/harness/release/release.ts (cached); this
 * copies recorder.ts into its tree at the same path and runs it there with
 * the release's own tsx, so the Jobs, signatures, termination messages and
 * records are the ones that release writes.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../../harness/chart/dockerfile.ts';
import { buildRelease } from '../../harness/release/release.ts';

const run = promisify(execFile);
const version = process.argv[2];
if (!version) throw new Error('usage: npm run golden:skew -- <version>');
const release = await buildRelease(version, console.log);
const inTree = join(release.tree, 'test/golden/skew/recorder.ts');
mkdirSync(join(release.tree, 'test/golden/skew'), { recursive: true });
copyFileSync(join(REPO_ROOT, 'test/golden/skew/recorder.ts'), inTree);
const out = join(REPO_ROOT, 'test/golden/skew', version);
rmSync(out, { recursive: true, force: true });
const { stdout } = await run(join(release.tree, 'node_modules/.bin/tsx'), [inTree, out, version, release.sha], { cwd: release.tree, maxBuffer: 1 << 26 });
process.stdout.write(stdout);
