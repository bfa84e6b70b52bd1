/**
 * The README's "Quick start on a cluster", read from README.md itself, so that
 * a README change that breaks the quick start fails its test. Only two kinds
 * of block are not run as written, and both are checked for shape instead:
 * the image block (`docker build` / `docker push`: no Docker and no registry
 * here, the image is imported into containerd under the same name) and the
 * block of `export` lines naming the reader's log server.
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
  /** Every other command, in order, continuation lines joined. */
  commands: string[];
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
export function shellBlocks(section: string): string[][] {
  const blocks: string[][] = [];
  let current: string[] | undefined;
  let indent = 0;
  for (const line of section.split('\n')) {
    const fence = /^(\s*)```(\S*)\s*$/.exec(line);
    if (current === undefined) {
      if (fence !== null && fence[2] !== '') {
        if (fence[2] !== 'sh') throw new Error(`a \`\`\`${fence[2]} block in the quick start: only sh blocks are run`);
        current = [];
        indent = fence[1]!.length;
      }
      continue;
    }
    if (fence !== null && fence[2] === '') {
      blocks.push(joinContinuations(current));
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
  const settings: QuickStart['settings'] = [];
  const commands: string[] = [];
  for (const block of shellBlocks(text)) {
    if (block.some((c) => c.startsWith('docker '))) {
      if (image !== undefined) throw new Error('the quick start has two docker blocks');
      const build = /^docker build -t (\S+) \.$/.exec(block[0] ?? '');
      const push = /^docker push (\S+)$/.exec(block[1] ?? '');
      if (block.length !== 2 || build === null || push === null || build[1] !== push[1]) {
        throw new Error(`the image block is no longer \`docker build -t IMAGE .\` then \`docker push IMAGE\`; the test only stands in for those:\n${block.join('\n')}`);
      }
      image = build[1];
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
  return { image, settings, commands, text };
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

/** One command in bash, as a reader pastes it into a terminal. */
export function runInBash(command: string, opts: { cwd: string; env: NodeJS.ProcessEnv; timeoutMs: number }): Promise<CommandRun> {
  const startedMs = Date.now();
  return new Promise((resolve) => {
    execFile('bash', ['-o', 'pipefail', '-c', command], { cwd: opts.cwd, env: opts.env, timeout: opts.timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1;
      resolve({ command, code, stdout, stderr: err !== null && err.killed ? `${stderr}\n(killed after ${opts.timeoutMs} ms)` : stderr, startedMs, endedMs: Date.now() });
    });
  });
}
