import { VersionApi } from '@kubernetes/client-node';
import type { ReviewDeps } from '../core/admission.ts';
import type { Config } from '../core/config.ts';
import { parseServerVersion, supportsNativeSidecars, type ServerVersion } from '../core/server-version.ts';
import { loadKubeConfig } from './client.ts';
import { startNamespaceCache } from './namespace-cache.ts';

export interface EdgeOptions {
  config: Config;
  kubeconfig?: string;
  log?: (level: 'info' | 'warn', msg: string, extra?: object) => void;
}

export interface Edge {
  deps: ReviewDeps;
  stop(): Promise<void>;
}

const defaultLog = (level: 'info' | 'warn', msg: string, extra?: object) =>
  process.stderr.write(JSON.stringify({ level, time: Date.now(), app: 'jobharvest-webhook', msg, ...extra }) + '\n');

/** Everything that talks to the API server. Undefined when no kubeconfig exists (standalone). */
export async function startEdge(opts: EdgeOptions): Promise<Edge | undefined> {
  const kc = loadKubeConfig(opts.kubeconfig);
  if (!kc) return undefined;
  const log = opts.log ?? defaultLog;
  let version: ServerVersion | undefined;
  try {
    const v = await kc.makeApiClient(VersionApi).getCode();
    version = parseServerVersion(v);
    if (version && !supportsNativeSidecars(version)) {
      log('warn', `Kubernetes ${v.gitVersion} has no native sidecars (needs 1.29+): Jobs will be admitted without the log sidecar`);
    }
  } catch (err) {
    log('warn', 'cannot read the server version; assuming native sidecars', { error: String((err as Error)?.message ?? err) });
  }
  const namespaces = await startNamespaceCache(kc, { log });
  return {
    deps: { config: opts.config, namespace: (n) => namespaces.get(n), serverVersion: () => version },
    stop: () => namespaces.stop(),
  };
}
