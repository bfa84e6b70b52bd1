import { parseAllDocuments, stringify } from 'yaml';
import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import { isObject, type Job, type Obj } from '../core/kube.ts';
import type { Config } from '../core/config.ts';
import { mutateJob, type MutateResult } from '../core/mutate.ts';

/** One Job-shaped thing found in the input, with where it came from, for explain. */
export interface Visit {
  ref: string;
  result: MutateResult;
}

/** Parses multi-document YAML (JSON is YAML too). Any syntax error is fatal and names its line. */
export function parseManifests(text: string, source: string): unknown[] {
  const docs = parseAllDocuments(text, { uniqueKeys: false });
  const out: unknown[] = [];
  for (const doc of docs) {
    const err = doc.errors[0];
    if (err) {
      const line = err.linePos?.[0]?.line;
      throw new JobharvestError(ERROR_CODES.BAD_INPUT, `${source}${line ? `:${line}` : ''}: ${err.message.split('\n')[0]}`);
    }
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (e) {
      // The yaml library refuses alias expansion past maxAliasCount (a "billion
      // laughs" document): that is bad input, not a failure of ours.
      throw new JobharvestError(ERROR_CODES.BAD_INPUT, `${source}: ${(e as Error).message.split('\n')[0]}`);
    }
    // A trailing `---` yields an empty document; it carries nothing to keep.
    if (value === null && doc.contents === null) continue;
    out.push(value);
  }
  return out;
}

export function renderManifests(objs: unknown[]): string {
  return objs.map((o) => stringify(o, { lineWidth: 0, aliasDuplicateObjects: false })).join('---\n');
}

/**
 * Runs the core over every Job, CronJob jobTemplate and List item, as if each
 * namespace had opted in; everything else passes through unchanged.
 */
export function injectManifests(objs: unknown[], config: Config): { objects: unknown[]; visits: Visit[] } {
  const visits: Visit[] = [];
  const objects = objs.map((o) => walk(o, config, visits));
  return { objects, visits };
}

function ref(o: Obj): string {
  const m = (o.metadata ?? {}) as { name?: string; generateName?: string; namespace?: string };
  const name = m.name ?? (m.generateName ? `${m.generateName}*` : '(unnamed)');
  return `${String(o.kind)} ${m.namespace ? `${m.namespace}/` : ''}${name}`;
}

function walk(o: unknown, config: Config, visits: Visit[]): unknown {
  if (!isObject(o)) return o;
  if (o.kind === 'Job' && (o.apiVersion === 'batch/v1' || o.apiVersion === undefined)) {
    const result = mutateJob(o as Job, { config, namespace: undefined, assumeOptedIn: true });
    visits.push({ ref: ref(o), result });
    return result.job;
  }
  if (o.kind === 'CronJob' && o.apiVersion === 'batch/v1' && isObject(o.spec) && isObject(o.spec.jobTemplate)) {
    const tpl = o.spec.jobTemplate as Obj;
    const cronMeta = (o.metadata ?? {}) as { namespace?: string; annotations?: Record<string, string> };
    // The Jobs the controller creates get the jobTemplate's metadata, so that is
    // where opt-out and configuration annotations are read from.
    const asJob: Job = {
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { ...((tpl.metadata as Obj) ?? {}), ...(cronMeta.namespace ? { namespace: cronMeta.namespace } : {}) },
      spec: (tpl.spec as Job['spec']) ?? {},
    };
    const result = mutateJob(asJob, { config, namespace: undefined, assumeOptedIn: true });
    visits.push({ ref: ref(o), result });
    if (result.decision.action === 'skip') return o;
    const { namespace: _ns, ...metadata } = result.job.metadata ?? {};
    return { ...o, spec: { ...o.spec, jobTemplate: { ...tpl, metadata, spec: result.job.spec } } };
  }
  if (typeof o.kind === 'string' && o.kind.endsWith('List') && Array.isArray(o.items)) {
    return { ...o, items: o.items.map((i) => walk(i, config, visits)) };
  }
  return o;
}
