// `node harvester.mjs uninstall`: the chart's pre-delete hook. `helm uninstall`
// must leave a cluster that works, and Helm deletes only what it rendered, so
// this undoes what the programs did at run time, in an order that keeps them
// from doing it again while Helm is still deleting them:
//
//   1. the MutatingWebhookConfiguration goes first: from then on every Job is
//      admitted untouched, whether the webhook's pods still run or not;
//   2. the webhook's and the harvester's bindings go next, so neither can
//      place a hold, bind a log reader or write a Secret again in the seconds
//      before Helm deletes their pods;
//   3. every hold the harvester placed (signed for its Job: nothing else is
//      one) is released: the Job's TTL as it was before the hold, so a Job
//      past it is deleted at once and the others when it runs out;
//   4. the log-reader RoleBindings the webhook made in each namespace, and
//      the certificate and signing Secrets it made, are deleted: only those
//      that carry its label (src/contract/managed-by.ts), under its names;
//      and the harvester's leader-election Lease.
//
// Jobs still running keep their sidecars, which ship to the log server with
// nothing of jobharvest's (in node mode; an api-mode sidecar loses its log
// reader with the chart's ClusterRole): docs/operations.md, "Uninstall".
// Nothing waits for them.
//
// The hook is bounded (--deadline-seconds) and never fails the uninstall:
// every step logs what it could not do and goes on, and the program exits 0.
// A failed hook would stop `helm uninstall` before Helm deletes anything.
import { AdmissionregistrationV1Api, BatchV1Api, CoordinationV1Api, CoreV1Api, KubeConfig, PatchStrategy, RbacAuthorizationV1Api, setHeaderOptions, type V1Job, type V1RoleBinding, type V1Secret } from '@kubernetes/client-node';
import { Command, InvalidArgumentError } from 'commander';
import { existsSync, readFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { join } from 'node:path';
import { ENV } from '../src/contract/env.ts';
import { INJECTED_LABEL } from '../src/contract/harvest.ts';
import { isManagedByUs, logReaderBindingNames } from '../src/contract/managed-by.ts';
import { keyFromText, type SigningKey } from '../src/contract/signature.ts';
import { statusOf } from './api-errors.ts';
import { holdOf, holdReleasePatch, HOLD_ANNOTATION } from './hold.ts';
import { LIST_PAGE_LIMIT, UNINJECTED_JOB_SELECTOR } from './kube.ts';
import { collect, int, level } from './flags.ts';
import { LEVELS, log, setLogLevel, type LogLevel, type Log } from './log.ts';

export interface UninstallSettings {
  readonly kubeconfig: string | undefined;
  /** The release's namespace: its RoleBindings and Secrets. */
  readonly namespace: string;
  readonly webhookConfiguration: string;
  readonly clusterRoleBindings: readonly string[];
  readonly roleBindings: readonly string[];
  /** The log-reader ClusterRole: its two RoleBindings are deleted in every namespace. Unset: none kept. */
  readonly logReaderRole: string | undefined;
  readonly secrets: readonly string[];
  /** The harvester's leader-election Lease, which it creates at its first election. */
  readonly leases: readonly string[];
  /** Holds are released only when the key they were signed with is known. */
  readonly signingKeyFile: string | undefined;
  readonly deadlineMs: number;
  /** After the bindings go, before the holds are read: the API server's authorizer follows RBAC through a cache. */
  readonly settleMs: number;
  readonly logLevel: LogLevel;
}


export function parseUninstallSettings(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): UninstallSettings {
  const cmd = new Command('harvester uninstall')
    .description("the chart's pre-delete hook: removes the webhook configuration, releases every hold, deletes what the programs created")
    .option('--kubeconfig <file>', "kubeconfig (default: the pod's service account, then $KUBECONFIG)")
    .option('--namespace <ns>', "the release's namespace (default: $POD_NAMESPACE)")
    .requiredOption('--webhook-configuration <name>', 'the MutatingWebhookConfiguration to delete first')
    .option('--cluster-role-binding <name>', "a ClusterRoleBinding of the programs to delete before the holds are released (repeatable)", collect, [])
    .option('--role-binding <name>', "a RoleBinding of the programs in the release's namespace to delete likewise (repeatable)", collect, [])
    .option('--log-reader-role <name>', "the log-reader ClusterRole: its RoleBindings that the webhook made are deleted in every namespace")
    .option('--secret <name>', "a Secret of the release's namespace to delete if the webhook made it (repeatable)", collect, [])
    .option('--lease <name>', "a Lease of the release's namespace to delete (the harvester's; repeatable)", collect, [])
    .option('--signing-key-file <file>', 'the key holds are signed with; without it no hold is released')
    .option('--deadline-seconds <n>', 'stop and exit 0 after this long, whatever is left', int(1, 3600), 120)
    .option('--settle-seconds <n>', 'wait between revoking the bindings and reading the holds', int(0, 60), 2)
    .option('--log-level <level>', "debug, info, warn or error (default: $JOBHARVEST_LOG_LEVEL, else 'info')", level)
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  cmd.parse(argv as string[], { from: 'user' });
  const o = cmd.opts<{
    kubeconfig?: string;
    namespace?: string;
    webhookConfiguration: string;
    clusterRoleBinding: string[];
    roleBinding: string[];
    logReaderRole?: string;
    secret: string[];
    lease: string[];
    signingKeyFile?: string;
    deadlineSeconds: number;
    settleSeconds: number;
    logLevel?: LogLevel;
  }>();
  const namespace = o.namespace ?? env.POD_NAMESPACE;
  if (!namespace) throw new InvalidArgumentError('--namespace or $POD_NAMESPACE is required');
  const envLevel = env.JOBHARVEST_LOG_LEVEL;
  return {
    kubeconfig: o.kubeconfig,
    namespace,
    webhookConfiguration: o.webhookConfiguration,
    clusterRoleBindings: o.clusterRoleBinding,
    roleBindings: o.roleBinding,
    logReaderRole: o.logReaderRole || undefined,
    secrets: o.secret,
    leases: o.lease,
    signingKeyFile: o.signingKeyFile,
    deadlineMs: o.deadlineSeconds * 1000,
    settleMs: o.settleSeconds * 1000,
    logLevel: o.logLevel ?? (envLevel && (LEVELS as readonly string[]).includes(envLevel) ? (envLevel as LogLevel) : 'info'),
  };
}

/** The merge patch that releases the Job's hold, or undefined when it has none this key signed (a tenant's is no hold, and is left alone). */
export function releaseOf(job: V1Job, key: SigningKey): object | undefined {
  const hold = holdOf(job, key);
  return hold ? holdReleasePatch(job, hold) : undefined;
}

/** A log-reader RoleBinding the webhook made: its label, one of its two names, the role it binds. */
export function isOurLogReaderBinding(rb: V1RoleBinding, clusterRole: string): boolean {
  const names = logReaderBindingNames(clusterRole);
  const name = rb.metadata?.name;
  return (name === names.sidecars || name === names.harvester) && isManagedByUs(rb.metadata?.labels) && rb.roleRef?.kind === 'ClusterRole' && rb.roleRef?.name === clusterRole;
}

/** A Secret the webhook made (auto certificates, the signing key); one an operator or cert-manager made is theirs. */
export function isOurSecret(s: V1Secret): boolean {
  return isManagedByUs(s.metadata?.labels);
}

/**
 * In the hook's pod: the service account's token and CA from the token
 * directory the sidecar reads too (JOBHARVEST_KUBE_TOKEN_DIR, by default the
 * kubelet's mount), so a runtime that mounts it elsewhere can say where.
 */
function kubeConfig(file: string | undefined, env: NodeJS.ProcessEnv): KubeConfig {
  const kc = new KubeConfig();
  if (file) {
    kc.loadFromFile(file);
    return kc;
  }
  const host = env.KUBERNETES_SERVICE_HOST;
  const dir = env[ENV.KUBE_TOKEN_DIR.name] || ENV.KUBE_TOKEN_DIR.default!;
  if (host && existsSync(join(dir, 'token'))) {
    const server = `https://${isIPv6(host) ? `[${host}]` : host}:${env.KUBERNETES_SERVICE_PORT ?? '443'}`;
    kc.loadFromClusterAndUser(
      { name: 'in-cluster', server, caFile: join(dir, 'ca.crt'), skipTLSVerify: false },
      { name: 'in-cluster', authProvider: { name: 'tokenFile', config: { tokenFile: join(dir, 'token') } } },
    );
    return kc;
  }
  kc.loadFromDefault();
  return kc;
}

export interface UninstallSummary {
  webhookConfiguration: 'deleted' | 'absent' | 'failed';
  bindingsRevoked: number;
  holdsReleased: number;
  /** Jobs carrying a hold annotation that does not verify: not jobharvest's, left alone. */
  holdsNotOurs: number;
  logReaderBindingsDeleted: number;
  secretsDeleted: number;
  leasesDeleted: number;
  /** Steps or objects that failed, or were not reached before the deadline. */
  failures: number;
}

const gone = (err: unknown): boolean => statusOf(err) === 404;

export async function uninstall(kc: KubeConfig, s: UninstallSettings, key: SigningKey | undefined, lg: Log, deadlineAt: number): Promise<UninstallSummary> {
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const batch = kc.makeApiClient(BatchV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  const coordination = kc.makeApiClient(CoordinationV1Api);
  const sum: UninstallSummary = { webhookConfiguration: 'failed', bindingsRevoked: 0, holdsReleased: 0, holdsNotOurs: 0, logReaderBindingsDeleted: 0, secretsDeleted: 0, leasesDeleted: 0, failures: 0 };
  const late = (step: string): boolean => {
    if (Date.now() < deadlineAt) return false;
    lg('warn', 'deadline reached; the rest is left', { step });
    sum.failures++;
    return true;
  };
  const failed = (what: string, err: unknown, fields: Record<string, unknown> = {}): void => {
    sum.failures++;
    lg('warn', `cannot ${what}; going on`, { ...fields, error: (err as Error)?.message ?? String(err) });
  };

  // 1. Admission first: no Job is injected from here on.
  try {
    await admission.deleteMutatingWebhookConfiguration({ name: s.webhookConfiguration });
    sum.webhookConfiguration = 'deleted';
    lg('info', 'webhook configuration deleted', { name: s.webhookConfiguration });
  } catch (err) {
    if (gone(err)) sum.webhookConfiguration = 'absent';
    else failed('delete the webhook configuration', err, { name: s.webhookConfiguration });
  }

  // 2. The programs' rights: the harvester can no longer place a hold, the webhook no longer bind or write a Secret.
  for (const name of s.clusterRoleBindings) {
    try {
      await rbac.deleteClusterRoleBinding({ name });
      sum.bindingsRevoked++;
    } catch (err) {
      if (!gone(err)) failed('delete a ClusterRoleBinding', err, { name });
    }
  }
  for (const name of s.roleBindings) {
    try {
      await rbac.deleteNamespacedRoleBinding({ name, namespace: s.namespace });
      sum.bindingsRevoked++;
    } catch (err) {
      if (!gone(err)) failed('delete a RoleBinding', err, { name, namespace: s.namespace });
    }
  }
  if (s.settleMs > 0) await new Promise((r) => setTimeout(r, Math.min(s.settleMs, Math.max(0, deadlineAt - Date.now()))));

  // 3. Every hold this key signed.
  if (!key) lg('warn', 'no signing key: holds are not released (each ends by itself at its maximum hold)');
  else if (!late('release holds')) {
    // The injected Jobs, then those without the label: a Job that missed its
    // injection is held the same way (harvester/missed.ts).
    for (const labelSelector of [`${INJECTED_LABEL}=true`, UNINJECTED_JOB_SELECTOR]) {
      try {
        let cont: string | undefined;
        do {
          const page = await batch.listJobForAllNamespaces({ labelSelector, limit: LIST_PAGE_LIMIT, ...(cont ? { _continue: cont } : {}) });
          for (const job of page.items) {
            if (job.metadata?.annotations?.[HOLD_ANNOTATION] === undefined) continue;
            if (late('release holds')) return sum;
            await release(job);
          }
          cont = page.metadata?._continue || undefined;
        } while (cont);
      } catch (err) {
        failed(`list the Jobs (${labelSelector})`, err);
      }
    }
  }

  async function release(first: V1Job): Promise<void> {
    const namespace = first.metadata!.namespace!;
    const name = first.metadata!.name!;
    let job: V1Job | undefined = first;
    // A conflict is another writer (the Job controller's status, say): read again and decide again.
    for (let attempt = 0; attempt < 5 && job; attempt++) {
      const patch = releaseOf(job, key!);
      if (!patch) {
        sum.holdsNotOurs++;
        lg('info', 'hold annotation not signed by this release; left alone', { namespace, name });
        return;
      }
      try {
        await batch.patchNamespacedJob({ name, namespace, body: patch }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
        sum.holdsReleased++;
        lg('info', 'hold released; the TTL is the one before the hold', { namespace, name, ttlSecondsAfterFinished: (patch as { spec: { ttlSecondsAfterFinished: number | null } }).spec.ttlSecondsAfterFinished });
        return;
      } catch (err) {
        if (gone(err)) return;
        if (statusOf(err) !== 409) return failed('release a hold', err, { namespace, name });
      }
      try {
        job = await batch.readNamespacedJob({ name, namespace });
      } catch (err) {
        if (gone(err)) return;
        return failed('read a held Job again', err, { namespace, name });
      }
    }
    if (job) failed('release a hold', new Error('conflicts on every attempt'), { namespace, name });
  }

  // 4. What the webhook made at run time. The log-reader bindings: in any namespace, so every namespace is asked.
  if (s.logReaderRole && !late('delete log-reader RoleBindings')) {
    const role = s.logReaderRole;
    const names = Object.values(logReaderBindingNames(role));
    const one = async (namespace: string, name: string): Promise<void> => {
      try {
        const rb = await rbac.readNamespacedRoleBinding({ name, namespace });
        if (!isOurLogReaderBinding(rb, role)) return;
        // Only the one read: a binding made again under the name since is not deleted blind.
        await rbac.deleteNamespacedRoleBinding({ name, namespace, body: { preconditions: { uid: rb.metadata!.uid!, resourceVersion: rb.metadata!.resourceVersion! } } });
        sum.logReaderBindingsDeleted++;
      } catch (err) {
        if (!gone(err)) failed('delete a log-reader RoleBinding', err, { namespace, name });
      }
    };
    try {
      let cont: string | undefined;
      do {
        const page = await core.listNamespace({ limit: LIST_PAGE_LIMIT, ...(cont ? { _continue: cont } : {}) });
        const work = page.items.filter((ns) => !ns.metadata?.deletionTimestamp).flatMap((ns) => names.map((n) => () => one(ns.metadata!.name!, n)));
        // A few at a time: a cluster of thousands of namespaces is two reads each.
        for (let i = 0; i < work.length; i += 8) {
          if (late('delete log-reader RoleBindings')) return sum;
          await Promise.all(work.slice(i, i + 8).map((f) => f()));
        }
        cont = page.metadata?._continue || undefined;
      } while (cont);
      lg('info', 'log-reader RoleBindings deleted', { role, count: sum.logReaderBindingsDeleted });
    } catch (err) {
      failed('list the namespaces', err);
    }
  }
  for (const name of s.secrets) {
    if (late('delete Secrets')) return sum;
    try {
      const secret = await core.readNamespacedSecret({ name, namespace: s.namespace });
      if (!isOurSecret(secret)) {
        lg('info', 'Secret not made by jobharvest; left alone', { name, namespace: s.namespace });
        continue;
      }
      await core.deleteNamespacedSecret({ name, namespace: s.namespace, body: { preconditions: { uid: secret.metadata!.uid!, resourceVersion: secret.metadata!.resourceVersion! } } });
      sum.secretsDeleted++;
      lg('info', 'Secret deleted', { name, namespace: s.namespace });
    } catch (err) {
      if (!gone(err)) failed('delete a Secret', err, { name, namespace: s.namespace });
    }
  }
  for (const name of s.leases) {
    if (late('delete Leases')) return sum;
    try {
      await coordination.deleteNamespacedLease({ name, namespace: s.namespace });
      sum.leasesDeleted++;
    } catch (err) {
      if (!gone(err)) failed('delete a Lease', err, { name, namespace: s.namespace });
    }
  }
  return sum;
}

function readKey(file: string | undefined, lg: Log): SigningKey | undefined {
  if (!file) return undefined;
  try {
    return keyFromText(readFileSync(file));
  } catch (err) {
    lg('warn', 'cannot read the signing key', { file, error: (err as Error).message });
    return undefined;
  }
}

export async function runUninstall(argv: readonly string[]): Promise<never> {
  let s: UninstallSettings;
  try {
    s = parseUninstallSettings(argv);
  } catch (err) {
    const e = err as { code?: string; message: string };
    if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version') process.exit(0);
    if (!e.code?.startsWith('commander.')) process.stderr.write(`harvester uninstall: ${e.message}\n`);
    process.exit(2);
  }
  setLogLevel(s.logLevel);
  const started = Date.now();
  const deadlineAt = started + s.deadlineMs;
  // Past the deadline by a margin, whatever is still waiting on the network: exit 0, so Helm goes on.
  setTimeout(() => {
    log('warn', 'deadline passed with calls still open; exiting');
    process.exit(0);
  }, s.deadlineMs + 5_000).unref();
  try {
    const summary = await uninstall(kubeConfig(s.kubeconfig, process.env), s, readKey(s.signingKeyFile, log), log, deadlineAt);
    log(summary.failures > 0 ? 'warn' : 'info', 'uninstall done', { ...summary, ms: Date.now() - started });
  } catch (err) {
    log('error', 'uninstall stopped', { error: (err as Error)?.message ?? String(err), ms: Date.now() - started });
  }
  process.exit(0);
}
