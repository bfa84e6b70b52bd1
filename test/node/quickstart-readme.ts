/**
 * The README's "Quick start on a cluster", read from README.md itself, so that
 * a README change that breaks the quick start fails its test. Every ```sh
 * block runs as written, the image block (`docker build` / `docker push`)
 * included, except the block of `export` lines naming the reader's log
 * server, which is checked for shape. Of the two ways step 1 installs the
 * chart, from the registry (`oci://`) and from the repository's folder, the
 * test runs the first and checks that the second differs only by the chart's
 * reference. ```text blocks (the arm64 build) are shown, not run here:
 * test/node/image.test.ts runs them.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../harness/chart/dockerfile.ts';

export const QUICK_START_HEADING = '## Quick start on a cluster';

export interface QuickStart {
  /** The image `docker build -t` names and `docker push` pushes. */
  image: string;
  /** The `export NAME=value` lines, in order. */
  settings: Array<{ name: string; value: string }>;
  /** The image block's commands: `docker build -t IMAGE .`, `docker push IMAGE`. */
  imageCommands: string[];
  /** Every other command, in order, continuation lines joined. */
  commands: string[];
  /** `helm install` from the repository's folder, left out of `commands` for the `oci://` one beside it. */
  folderInstall: string | undefined;
  /** The ```text blocks' commands. */
  shown: string[][];
  /** The section's prose and commands, for the outputs it promises. */
  text: string;
}

export function readmeText(): string {
  return readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
}

/** The section from its heading to the next `## ` heading. */
export function quickStartSection(readme: string): string {
  const start = readme.indexOf(`\n${QUICK_START_HEADING}\n`);
  if (start < 0) throw new Error(`README.md has no "${QUICK_START_HEADING}" section`);
  const rest = readme.slice(start + 1);
  const end = rest.indexOf('\n## ', QUICK_START_HEADING.length);
  return end < 0 ? rest : rest.slice(0, end + 1);
}

/** The commands of each ```sh block, list-item indentation removed and `\` continuations joined. */
export function shellBlocks(section: string, shown: string[][] = []): string[][] {
  const blocks: string[][] = [];
  let isText = false;
  let current: string[] | undefined;
  let indent = 0;
  for (const line of section.split('\n')) {
    const fence = /^(\s*)```(\S*)\s*$/.exec(line);
    if (current === undefined) {
      if (fence !== null && fence[2] !== '') {
        if (fence[2] !== 'sh' && fence[2] !== 'text') throw new Error(`a \`\`\`${fence[2]} block in the quick start: only sh blocks are run (text ones are shown)`);
        isText = fence[2] === 'text';
        current = [];
        indent = fence[1]!.length;
      }
      continue;
    }
    if (fence !== null && fence[2] === '') {
      (isText ? shown : blocks).push(joinContinuations(current));
      current = undefined;
      continue;
    }
    if (line.trim() !== '' && !line.startsWith(' '.repeat(indent))) throw new Error(`a line of a quick-start block is indented less than its fence: ${line}`);
    current.push(line.slice(indent));
  }
  if (current !== undefined) throw new Error('an unclosed ```sh block in the quick start');
  return blocks;
}

function joinContinuations(lines: string[]): string[] {
  const commands: string[] = [];
  let pending = '';
  for (const line of lines) {
    if (line.trim() === '' || line.trimStart().startsWith('#')) continue;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1).trimEnd()} `;
      continue;
    }
    commands.push(`${pending}${pending === '' ? line : line.trimStart()}`.trim());
    pending = '';
  }
  if (pending !== '') throw new Error(`a quick-start command ends with a continuation: ${pending}`);
  return commands;
}

export function parseQuickStart(readme: string): QuickStart {
  const text = quickStartSection(readme);
  let image: string | undefined;
  let imageCommands: string[] = [];
  const settings: QuickStart['settings'] = [];
  const commands: string[] = [];
  const shown: string[][] = [];
  for (const block of shellBlocks(text, shown)) {
    if (block.some((c) => c.startsWith('docker '))) {
      if (image !== undefined) throw new Error('the quick start has two docker blocks');
      const build = /^docker build -t (\S+) \.$/.exec(block[0] ?? '');
      const push = /^docker push (\S+)$/.exec(block[1] ?? '');
      if (block.length !== 2 || build === null || push === null || build[1] !== push[1]) {
        throw new Error(`the image block is no longer \`docker build -t IMAGE .\` then \`docker push IMAGE\`; the test only stands in for those:\n${block.join('\n')}`);
      }
      image = build[1];
      imageCommands = block;
      continue;
    }
    if (block.some((c) => c.startsWith('export '))) {
      for (const c of block) {
        const m = /^export ([A-Z_][A-Z0-9_]*)=(\S+)$/.exec(c);
        if (m === null) throw new Error(`a settings block line is not \`export NAME=value\`: ${c}`);
        settings.push({ name: m[1]!, value: m[2]! });
      }
      continue;
    }
    commands.push(...block);
  }
  if (image === undefined) throw new Error('the quick start builds no image');
  const installs = commands.filter((c) => c.startsWith('helm install '));
  const oci = installs.filter((c) => / oci:\/\//.test(c));
  let folderInstall: string | undefined;
  if (oci.length > 0) {
    if (oci.length !== 1 || installs.length !== 2) throw new Error(`step 1 installs the chart from oci:// and from the folder, once each: ${installs.join('\n')}`);
    folderInstall = installs.find((c) => !oci.includes(c))!;
    commands.splice(commands.indexOf(folderInstall), 1);
  }
  return { image, imageCommands, settings, commands, folderInstall, shown, text };
}

/** What containerd calls an image reference: a name without a registry host is Docker Hub's. */
export function containerdName(ref: string): string {
  const first = ref.split('/')[0]!;
  const hasHost = ref.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost');
  if (hasHost) return ref;
  return ref.includes('/') ? `docker.io/${ref}` : `docker.io/library/${ref}`;
}

export interface CommandRun {
  command: string;
  code: number;
  stdout: string;
  stderr: string;
  startedMs: number;
  endedMs: number;
}

/**
 * The `helm install` of the registry's chart with the chart's reference (and
 * its --version) replaced by `folder`: what the folder's install must read.
 */
export function asFolderInstall(ociInstall: string, folder: string): string {
  return ociInstall.replace(/ oci:\/\/\S+/, ` ${folder}`).replace(/ --version \S+/, '');
}

/** One command in bash, as a reader pastes it into a terminal; `argv` wraps it (a namespace, say). */
export function runInBash(command: string, opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number; argv?: (command: string) => string[] }): Promise<CommandRun> {
  const startedMs = Date.now();
  const [bin, ...args] = opts.argv?.(command) ?? ['bash', '-o', 'pipefail', '-c', command];
  return new Promise((resolve) => {
    execFile(bin!, args, { cwd: opts.cwd, env: opts.env, timeout: opts.timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1;
      resolve({ command, code, stdout, stderr: err !== null && err.killed ? `${stderr}\n(killed after ${opts.timeoutMs} ms)` : stderr, startedMs, endedMs: Date.now() });
    });
  });
}
