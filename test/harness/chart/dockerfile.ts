/**
 * A small reader of the repository's Dockerfile: stages and their instructions,
 * enough to check what the image copies without a Docker engine.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export interface Instruction {
  keyword: string;
  /** The arguments, continuation lines joined. */
  args: string;
}

export interface Stage {
  from: string;
  /** FROM's --platform, as written (`$BUILDPLATFORM`). */
  platform?: string;
  name: string | undefined;
  instructions: Instruction[];
}

export function readDockerfile(path = `${REPO_ROOT}Dockerfile`): Stage[] {
  const logical: string[] = [];
  let pending = '';
  for (const raw of readFileSync(path, 'utf8').split('\n')) {
    const line = raw.trim();
    if (pending === '' && (line === '' || line.startsWith('#'))) continue;
    if (line.endsWith('\\')) {
      pending += line.slice(0, -1) + ' ';
      continue;
    }
    logical.push(pending + line);
    pending = '';
  }
  const stages: Stage[] = [];
  for (const line of logical) {
    const [, keyword = '', args = ''] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
    const upper = keyword.toUpperCase();
    if (upper === 'FROM') {
      const words = args.split(/\s+/);
      const platform = words.find((w) => w.startsWith('--platform='))?.slice('--platform='.length);
      const [image = '', as, name] = words.filter((w) => !w.startsWith('--'));
      stages.push({ from: image, ...(platform === undefined ? {} : { platform }), name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] });
    } else if (stages.length > 0) {
      stages.at(-1)!.instructions.push({ keyword: upper, args });
    }
  }
  return stages;
}

export interface Copy {
  from: string | undefined;
  sources: string[];
  destination: string;
}

/** COPY instructions of a stage, in shell form (the only form the Dockerfile uses). */
export function copies(stage: Stage): Copy[] {
  return stage.instructions
    .filter((i) => i.keyword === 'COPY')
    .map((i) => {
      const words = i.args.split(/\s+/);
      const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
      const paths = words.filter((w) => !w.startsWith('--'));
      return { from, sources: paths.slice(0, -1), destination: paths.at(-1)! };
    });
}

/** The JSON-form ENTRYPOINT or CMD of a stage. */
export function execForm(stage: Stage, keyword: 'ENTRYPOINT' | 'CMD'): string[] {
  const found = stage.instructions.filter((i) => i.keyword === keyword).at(-1);
  if (found === undefined) throw new Error(`no ${keyword} in the stage from ${stage.from}`);
  return JSON.parse(found.args) as string[];
}

export function workdir(stage: Stage): string {
  const found = stage.instructions.filter((i) => i.keyword === 'WORKDIR').at(-1);
  if (found === undefined) throw new Error(`no WORKDIR in the stage from ${stage.from}`);
  return found.args.trim();
}
