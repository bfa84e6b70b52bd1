/**
 * Runs the Helm built with the test cluster against charts/jobharvest and parses
 * what it renders, for the chart tests.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, stringify } from 'yaml';

export const CHART_DIR = fileURLToPath(new URL('../../../charts/jobharvest', import.meta.url));

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; annotations?: Record<string, string>; labels?: Record<string, string> };
  [key: string]: unknown;
}

export interface HelmRun {
  code: number;
  stdout: string;
  stderr: string;
}

export function runHelm(helm: string, args: string[]): Promise<HelmRun> {
  return new Promise((resolve) => {
    execFile(helm, args, { maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** `helm` with a values file written from `values`; the file is removed afterwards. */
export async function withValues<T>(values: object, fn: (file: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'jobharvest-chart-'));
  const file = join(dir, 'values.yaml');
  try {
    await writeFile(file, stringify(values));
    return await fn(file);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export interface TemplateOptions {
  release: string;
  namespace: string;
  values?: object;
  extraArgs?: string[];
}

/** `helm template`; resolves with the run, whether it failed or not. */
export function template(helm: string, opts: TemplateOptions): Promise<HelmRun> {
  return withValues(opts.values ?? {}, (file) =>
    runHelm(helm, ['template', opts.release, CHART_DIR, '--namespace', opts.namespace, '--values', file, ...(opts.extraArgs ?? [])]),
  );
}

/** `helm template` that must succeed; the rendered objects in order. */
export async function render(helm: string, opts: TemplateOptions): Promise<K8sObject[]> {
  const run = await template(helm, opts);
  if (run.code !== 0) throw new Error(`helm template failed (${run.code}): ${run.stderr}`);
  return parseObjects(run.stdout);
}

export function parseObjects(text: string): K8sObject[] {
  const objects: K8sObject[] = [];
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new Error(`helm rendered invalid YAML: ${doc.errors[0]?.message}`);
    const value = doc.toJS() as K8sObject | null;
    if (value !== null) objects.push(value);
  }
  return objects;
}

/** The single object of that kind (and name, if given); throws if there is not exactly one. */
export function one<T = K8sObject>(objects: K8sObject[], kind: string, name?: string): T & K8sObject {
  const found = objects.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  if (found.length !== 1) throw new Error(`expected one ${kind}${name ? ` ${name}` : ''}, rendered ${found.length}`);
  return found[0] as T & K8sObject;
}

/**
 * The test control plane has no Service network: a webhook configuration that
 * names a Service makes the API server look the name up in DNS and call
 * whatever answers, off this machine. Every chart test that leaves the rendered
 * configuration in place long enough for a Job to be created points it at a
 * loopback URL instead (a closed port fails the call at once, as an absent pod
 * would), keeping everything else as rendered.
 */
export function loopbackWebhooks<T extends K8sObject>(obj: T, url: string): T {
  if (obj.kind !== 'MutatingWebhookConfiguration') return obj;
  const webhooks = (obj as unknown as { webhooks?: Array<{ clientConfig?: { service?: { path?: string } } }> }).webhooks ?? [];
  return {
    ...obj,
    webhooks: webhooks.map((w) => {
      const { service, ...rest } = w.clientConfig ?? {};
      return { ...w, clientConfig: { ...rest, url: `${url}${service?.path ?? '/mutate'}` } };
    }),
  };
}
