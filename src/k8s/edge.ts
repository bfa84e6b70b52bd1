import { AdmissionregistrationV1Api, CoreV1Api, RbacAuthorizationV1Api, VersionApi, type KubeConfig } from '@kubernetes/client-node';
import type { ReviewDeps } from '../core/admission.ts';
import type { Config } from '../core/config.ts';
import { keyId } from '../contract/signature.ts';
import { isSupportedKubernetes, kubernetesSupportMessage, parseServerVersion, type ServerVersion } from '../core/server-version.ts';
import { generateBundle } from '../tls/generate.ts';
import { watchFilePair, type FilePair } from '../tls/file-source.ts';
import { secondsUntilExpiry } from '../tls/inspect.ts';
import { DEFAULT_POLICY, serviceDnsNames } from '../tls/plan.ts';
import { CaBundleReconciler } from './cabundle.ts';
import { CertSecretManager } from './cert-secret.ts';
import { loadKubeConfig } from './client.ts';
import { messageOf } from './errors.ts';
import { retryUntil } from './retry.ts';
import { ensureSigningKey } from './signing-secret.ts';
import { managedByLabels } from './labels.ts';
import type { Log } from '../contract/log.ts';
import { LogReaderRbac, optedIn } from './log-reader-rbac.ts';
import { startNamespaceCache } from './namespace-cache.ts';
import { startNamespacePolicy } from './namespace-policy.ts';
import { namespaceLookup, type LiveReadResult, type LiveReadTrigger } from './namespace-live.ts';
import { registerUrlWebhook } from './register.ts';

export type CertMode = 'auto' | 'cert-manager' | 'provided' | 'local';

export interface EdgeOptions {
  config: Config;
  kubeconfig?: string | undefined;
  certMode: CertMode;
  namespace: string;
  serviceName: string;
  certSecret: string;
  extraDnsNames: string[];
  extraIps: string[];
  /** The MutatingWebhookConfiguration whose caBundle is reconciled (auto/local) or checked (others). */
  webhookConfigName?: string | undefined;
  /** Out of cluster: register a URL-based webhook at this address (local certificate mode). */
  webhookUrl?: string | undefined;
  failurePolicy?: 'Ignore' | 'Fail';
  logReaderClusterRole: string;
  apiRbac: boolean;
  /**
   * The harvester's service account (in the webhook's namespace): bound to
   * the log reader in opted-in namespaces, so it can read the pods it reports
   * on and ship what their sidecars could not. Unset: no binding (out of cluster).
   */
  harvesterServiceAccount?: string | undefined;
  /** Signs each injection for the harvester (src/contract/signature.ts). */
  signingKey?: Buffer | undefined;
  /** Without signingKey: the Secret of `namespace` to read it from, created once if absent. */
  signingSecret?: string | undefined;
  tlsCertFile?: string | undefined;
  tlsKeyFile?: string | undefined;
  certIntervalMs?: number;
  caBundleIntervalMs?: number;
  log: Log;
  onCertExpiry?: (seconds: number) => void;
  onCaBundle?: (matches: boolean) => void;
  /**
   * The API server's release (its /version gitVersion) and whether it is at
   * least MIN_KUBERNETES, read once at start; not called when /version
   * cannot be read.
   */
  onKubernetesSupport?: (gitVersion: string, supported: boolean) => void;
  /** Each live read of a namespace an admission waited for (see namespace-live.ts). */
  onNamespaceLiveRead?: (trigger: LiveReadTrigger, result: LiveReadResult) => void;
}

export interface Edge {
  deps: ReviewDeps;
  tls: FilePair;
  /** Called with each new serving certificate, for hot reload. */
  onTls(cb: (p: FilePair) => void): void;
  readiness(): { ready: boolean; reason?: string };
  stop(): Promise<void>;
}

/** Everything that talks to the API server. Undefined when no kubeconfig exists (standalone). */
export async function startEdge(opts: EdgeOptions): Promise<Edge | undefined> {
  const kc = loadKubeConfig(opts.kubeconfig);
  if (!kc) return undefined;
  return startEdgeWith(kc, opts);
}

export async function startEdgeWith(kc: KubeConfig, opts: EdgeOptions): Promise<Edge> {
  const { log } = opts;
  const stops: Array<() => void | Promise<void>> = [];
  const version = await serverVersion(kc, log, opts.onKubernetesSupport);

  const webhookSubject = opts.harvesterServiceAccount ? { serviceAccount: opts.harvesterServiceAccount, namespace: opts.namespace } : undefined;
  const rbac =
    opts.apiRbac || webhookSubject
      ? new LogReaderRbac(kc.makeApiClient(RbacAuthorizationV1Api), { config: opts.config, clusterRole: opts.logReaderClusterRole, log, sidecars: opts.apiRbac, webhook: webhookSubject })
      : undefined;
  const namespaces = await startNamespaceCache(kc, {
    log: (l, m, e) => log(l, m, e),
    ...(rbac ? { listeners: [(ns, deleted) => rbac.onNamespace(ns, deleted)] } : {}),
  });
  stops.push(() => namespaces.stop());
  const lookup = namespaceLookup(namespaces, {
    optedIn: (ns) => optedIn(ns, opts.config),
    log,
    ...(opts.onNamespaceLiveRead ? { onLiveRead: opts.onNamespaceLiveRead } : {}),
  });
  const policy = await startNamespacePolicy(kc, log);
  stops.push(() => policy.stop());
  const admissionNamespace = async (name: string) => {
    const meta = await lookup(name);
    return meta && policy.with(meta);
  };

  const tlsListeners: Array<(p: FilePair) => void> = [];
  let tls: FilePair | undefined;
  const publishTls = (p: FilePair) => {
    tls = p;
    opts.onCertExpiry?.(secondsUntilExpiry(p.cert, new Date()));
    for (const l of tlsListeners) l(p);
  };

  const writesCaBundle = opts.certMode === 'auto' || opts.certMode === 'local';
  const caBundle = opts.webhookConfigName
    ? new CaBundleReconciler(kc.makeApiClient(AdmissionregistrationV1Api), {
        webhookConfigName: opts.webhookConfigName,
        write: writesCaBundle,
        log,
        ...(opts.caBundleIntervalMs ? { intervalMs: opts.caBundleIntervalMs } : {}),
        ...(opts.onCaBundle ? { onStatus: opts.onCaBundle } : {}),
      })
    : undefined;

  if (opts.certMode === 'auto') {
    const mgr = new CertSecretManager(kc.makeApiClient(CoreV1Api), {
      namespace: opts.namespace,
      name: opts.certSecret,
      policy: { ...DEFAULT_POLICY, dnsNames: serviceDnsNames(opts.serviceName, opts.namespace, opts.extraDnsNames), ipAddresses: opts.extraIps },
      labels: managedByLabels(),
      log,
      ...(opts.certIntervalMs ? { intervalMs: opts.certIntervalMs } : {}),
      onMaterial: (m) => {
        // Publish the bundle before serving the new leaf, so the API server
        // trusts a leaf from a rotated CA by the time it is presented.
        void (caBundle ? caBundle.setMaterial(m.caBundle, m.tlsCert) : Promise.resolve()).finally(() => publishTls({ cert: m.tlsCert, key: m.tlsKey }));
      },
    });
    const m = await retryUntil(() => mgr.start(), {
      deadlineMs: 120_000,
      baseMs: 200,
      maxMs: 5_000,
      onRetry: (err) => log('warn', 'cannot bootstrap the certificate Secret yet; retrying', { error: messageOf(err) }),
    });
    tls = { cert: m.tlsCert, key: m.tlsKey };
    stops.push(() => mgr.stop());
  } else if (opts.certMode === 'local') {
    const host = opts.webhookUrl ? new URL(opts.webhookUrl).hostname : '127.0.0.1';
    const isIp = /^[\d.]+$|:/.test(host);
    const b = await generateBundle({
      dnsNames: ['localhost', ...(isIp ? [] : [host]), ...opts.extraDnsNames],
      ipAddresses: [...new Set(['127.0.0.1', ...(isIp ? [host.replace(/^\[|\]$/g, '')] : []), ...opts.extraIps])],
    });
    tls = b.serving;
    if (opts.webhookUrl && opts.webhookConfigName) {
      await registerUrlWebhook(kc.makeApiClient(AdmissionregistrationV1Api), {
        name: opts.webhookConfigName,
        url: opts.webhookUrl,
        caBundle: b.ca.cert,
        config: opts.config,
        ...(opts.failurePolicy ? { failurePolicy: opts.failurePolicy } : {}),
      });
      log('info', 'registered URL webhook', { webhookConfiguration: opts.webhookConfigName, url: opts.webhookUrl });
    }
    await caBundle?.setMaterial(b.ca.cert, tls.cert);
  } else {
    if (!opts.tlsCertFile || !opts.tlsKeyFile) throw new Error(`--cert-mode ${opts.certMode} needs --tls-cert and --tls-key`);
    const w = watchFilePair(opts.tlsCertFile, opts.tlsKeyFile, {
      onChange: (p) => {
        publishTls(p);
        void caBundle?.setMaterial(undefined, p.cert);
      },
      onError: (e) => log('warn', 'cannot use the mounted certificate; keeping the current one', { error: messageOf(e) }),
    });
    tls = w.initial;
    stops.push(() => w.stop());
    await caBundle?.setMaterial(undefined, tls.cert);
  }
  let signingKey = opts.signingKey;
  if (!signingKey && opts.signingSecret) {
    const name = opts.signingSecret;
    signingKey = await retryUntil(() => ensureSigningKey(kc.makeApiClient(CoreV1Api), { namespace: opts.namespace, name, labels: managedByLabels(), log }), {
      deadlineMs: 120_000,
      baseMs: 200,
      maxMs: 5_000,
      onRetry: (err) => log('warn', 'cannot read or create the signing key Secret yet; retrying', { error: messageOf(err) }),
    });
  }
  if (signingKey) log('info', 'signing injections', { keyId: keyId(signingKey) });
  opts.onCertExpiry?.(secondsUntilExpiry(tls.cert, new Date()));
  caBundle?.start();
  if (caBundle) stops.push(() => caBundle.stop());

  return {
    deps: {
      config: opts.config,
      namespace: admissionNamespace,
      serverVersion: () => version,
      signingKey,
    },
    tls,
    onTls: (cb) => tlsListeners.push(cb),
    readiness: () => {
      if (!tls) return { ready: false, reason: 'no serving certificate loaded' };
      if (caBundle && !caBundle.inSync()) return { ready: false, reason: `caBundle of ${opts.webhookConfigName} does not trust the serving certificate` };
      if (!namespaces.synced()) return { ready: false, reason: 'namespace cache not synced' };
      return { ready: true };
    },
    stop: async () => {
      for (const s of stops.reverse()) await s();
    },
  };
}

async function serverVersion(kc: KubeConfig, log: Log, onSupport?: EdgeOptions['onKubernetesSupport']): Promise<ServerVersion | undefined> {
  try {
    const v = await kc.makeApiClient(VersionApi).getCode();
    const parsed = parseServerVersion(v);
    if (parsed) {
      const gitVersion = v.gitVersion || `v${parsed.major}.${parsed.minor}`;
      const supported = isSupportedKubernetes(parsed);
      log(supported ? 'info' : 'warn', kubernetesSupportMessage(gitVersion, parsed), { kubernetesVersion: gitVersion, supported });
      onSupport?.(gitVersion, supported);
    }
    return parsed;
  } catch (err) {
    log('warn', 'cannot read the server version; assuming native sidecars', { error: messageOf(err) });
    return undefined;
  }
}
