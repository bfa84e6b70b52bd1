// Ships what a pod's sidecar could not, through pods/log, with the sidecar's
// own code: its api-mode reader (resume by timestamp) and its sinks, run
// in-process as a Pipeline whose checkpoint is seeded from the termination
// message. The webhook imports the sidecar here (and only here, lazily, so
// its bundle loads the sidecar's code only when a harvest runs); the lint
// boundary forbids only the other direction, which would put webhook code
// into the sidecar's image-wide bundle.
//
// Two passes over the same positions: the first counts the lines that are
// missing (a sink that accepts everything and sends nothing), the second
// ships them. Lines lost = counted - shipped, exactly, even if the server
// never comes back.
import type { KubeConfig, V1Container, V1Pod } from '@kubernetes/client-node';
import { CoreV1Api } from '@kubernetes/client-node';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ENV } from '../contract/env.ts';
import type { TerminationMessage } from '../contract/termination.ts';

export interface HarvestResult {
  /** Lines after the positions, i.e. not at the server according to the sidecar. */
  readonly missing: number;
  readonly shipped: number;
  readonly lost: number;
}

export interface HarvestOptions {
  /** How long the shipping pass may retry (the rest of the maximum hold). */
  readonly deadlineMs: number;
}

/** The sidecar's env as the kubelet gave it to the container (plain values, Downward API, Secrets). */
export async function sidecarEnv(core: CoreV1Api, pod: V1Pod, c: V1Container): Promise<Record<string, string>> {
  const env: Record<string, string> = {};
  const ns = pod.metadata?.namespace ?? '';
  for (const v of c.env ?? []) {
    if (v.value !== undefined) env[v.name] = v.value.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, k: string) => env[k] ?? m);
    else if (v.valueFrom?.fieldRef) {
      const value = fieldOf(pod, v.valueFrom.fieldRef.fieldPath);
      if (value !== undefined) env[v.name] = value;
    } else if (v.valueFrom?.secretKeyRef) {
      const ref = v.valueFrom.secretKeyRef;
      try {
        const s = await core.readNamespacedSecret({ name: ref.name!, namespace: ns });
        const data = s.data?.[ref.key];
        if (data !== undefined) env[v.name] = Buffer.from(data, 'base64').toString('utf8');
      } catch (err) {
        if (!ref.optional) throw err;
      }
    }
  }
  return env;
}

function fieldOf(pod: V1Pod, path: string): string | undefined {
  switch (path) {
    case 'metadata.name':
      return pod.metadata?.name;
    case 'metadata.namespace':
      return pod.metadata?.namespace;
    case 'metadata.uid':
      return pod.metadata?.uid;
    case 'spec.nodeName':
      return pod.spec?.nodeName;
    case 'spec.serviceAccountName':
      return pod.spec?.serviceAccountName;
  }
  const label = /^metadata\.labels\['(.+)'\]$/.exec(path);
  if (label) return pod.metadata?.labels?.[label[1]!];
  return undefined;
}

/** The checkpoint the sidecar's api reader resumes from: the message's positions, its finished runs skipped. */
export function checkpointOf(podUid: string, message: TerminationMessage | undefined): object {
  const files: Record<string, object> = {};
  for (const run of message?.done ?? []) files[`${run}/api`] = { offset: 0, done: true };
  for (const [container, restart, ts, n, o] of message?.runs ?? []) {
    if (ts === null) continue;
    // Node mode does not know line numbers; any count > 0 makes the reader skip by timestamp.
    files[`${container}/${restart}/api`] = { offset: o ?? Math.max(1, n), done: false, ts, n: Math.max(1, n) };
  }
  return { version: 1, podUid, savedAt: new Date().toISOString(), files };
}

/** Writes the API's address and credentials where the sidecar's client reads them. */
async function credentials(kc: KubeConfig, dir: string): Promise<string> {
  const cluster = kc.getCurrentCluster();
  const user = kc.getCurrentUser();
  if (!cluster) throw new Error('no current cluster in the kubeconfig');
  let token = user?.token;
  if (!token) {
    // In cluster: the service-account token file, re-read as it rotates.
    const opts: { headers?: Record<string, string> } = {};
    await kc.applyToHTTPSOptions(opts as never);
    const auth = opts.headers?.Authorization ?? opts.headers?.authorization;
    token = auth?.replace(/^Bearer\s+/i, '');
  }
  if (!token) throw new Error('the harvester needs a bearer token (in-cluster service account or a token kubeconfig)');
  await writeFile(join(dir, 'token'), token, { mode: 0o600 });
  const ca = cluster.caData ? Buffer.from(cluster.caData, 'base64') : undefined;
  if (ca) await writeFile(join(dir, 'ca.crt'), ca);
  else if (cluster.caFile) await writeFile(join(dir, 'ca.crt'), await readFile(cluster.caFile));
  return cluster.server;
}

export async function harvestPod(kc: KubeConfig, pod: V1Pod, container: string, message: TerminationMessage | undefined, opts: HarvestOptions): Promise<HarvestResult> {
  const core = kc.makeApiClient(CoreV1Api);
  const spec = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].find((c) => c.name === container);
  if (!spec) throw new Error(`pod ${pod.metadata?.name} has no container ${container}`);
  const env = await sidecarEnv(core, pod, spec);
  const dir = await mkdtemp(join(tmpdir(), 'jobharvest-harvest-'));
  try {
    const tokenDir = join(dir, 'token');
    await mkdir(tokenDir);
    const apiUrl = await credentials(kc, tokenDir);
    const uid = pod.metadata!.uid!;
    const base = {
      ...env,
      [ENV.POD_NAME.name]: pod.metadata!.name!,
      [ENV.POD_NAMESPACE.name]: pod.metadata!.namespace!,
      [ENV.POD_UID.name]: uid,
      [ENV.MODE.name]: 'api',
      [ENV.SELF_CONTAINER.name]: container,
      [ENV.KUBE_API_URL.name]: apiUrl,
      [ENV.KUBE_TOKEN_DIR.name]: tokenDir,
      // Not the webhook's own /dev/termination-log: a file that does not exist, so none is written.
      [ENV.TERMINATION_LOG.name]: join(dir, 'no-termination-log'),
      [ENV.METRICS_PORT.name]: '0',
    };
    const { loadConfig } = await import('../../sidecar/config.ts');
    const { Pipeline } = await import('../../sidecar/pipeline.ts');
    const pass = async (name: string, drainSeconds: number, sink?: import('../../sidecar/sinks/types.ts').Sink) => {
      const stateDir = join(dir, name);
      await mkdir(stateDir);
      await writeFile(join(stateDir, 'checkpoint.json'), JSON.stringify(checkpointOf(uid, message)));
      const cfg = loadConfig({ ...base, [ENV.STATE_DIR.name]: stateDir, [ENV.DRAIN_SECONDS.name]: String(drainSeconds) });
      const p = new Pipeline(cfg, sink ? { sink } : {});
      await p.start();
      return p.drain();
    };
    const counted = await pass('count', 300, { send: async () => ({ kind: 'ok' }) });
    const missing = counted.lines_shipped;
    // The pipeline keeps up to 2 s of its drain budget for its final writes; add them, so it retries until the deadline.
    const shipped = missing === 0 ? 0 : (await pass('ship', Math.ceil(opts.deadlineMs / 1000) + 2)).lines_shipped;
    return { missing, shipped, lost: Math.max(0, missing - shipped) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
