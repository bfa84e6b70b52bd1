/**
 * Starts a throwaway Kubernetes control plane as local processes: etcd,
 * kube-apiserver and kube-controller-manager, on free 127.0.0.1 ports, with
 * flags close to controller-runtime's envtest. There is no kubelet and no
 * scheduler: tests bind pods and set their status through the API.
 */
import { randomBytes } from 'node:crypto';
import { appendFileSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { locateBinaries, type Versions } from './binaries.ts';
import { httpCall } from './http.ts';
import { writeKubeconfig } from './kubeconfig.ts';
import { createPki } from './pki.ts';
import { createKubeletClientCert } from './kubelet-client.ts';
import { freePorts } from '../../support/ports.ts';
import { describeExit, onRunnerExit, startProcess, startWatchdog, type ManagedProcess } from '../../support/process.ts';
import { waitFor } from '../../support/wait.ts';

/**
 * Controllers the tests rely on. The garbage collector is required because
 * the TTL-after-finished controller deletes Jobs with Foreground propagation,
 * which only completes once the collector removes the Job's pods. The
 * service-account controllers create the `default` ServiceAccount that the
 * ServiceAccount admission plugin demands of every pod; namespace lets tests
 * delete their namespaces; root-ca-cert-publisher fills kube-root-ca.crt,
 * which projected service-account volumes reference. The quota admission
 * plugin enforces only what the resourcequota controller has written into a
 * quota's status, so without it a ResourceQuota would refuse nothing.
 */
export const DEFAULT_CONTROLLERS = [
  'job-controller',
  'cronjob-controller',
  'ttl-after-finished-controller',
  'garbage-collector-controller',
  'serviceaccount-controller',
  'serviceaccount-token-controller',
  'root-ca-certificate-publisher-controller',
  'namespace-controller',
  'resourcequota-controller',
];

const SERVICE_CIDR = '10.0.0.0/24';
// The API server takes the first address of the service range for the
// `kubernetes` Service, so its serving certificate must name it.
const SERVICE_IP = '10.0.0.1';
const ADMIN_USER = 'jobharvest-admin';
const CONTROLLER_MANAGER_USER = 'system:kube-controller-manager';

export interface ClusterOptions {
  /** Folder holding the binaries; defaults to test/harness/cluster/bin. */
  binDir?: string;
  /** Parent of the cluster's temporary folder; defaults to the OS temp dir. */
  tmpRoot?: string;
  /** kube-controller-manager --controllers; an empty list skips the controller manager. */
  controllers?: string[];
  apiServerFlags?: string[];
  controllerManagerFlags?: string[];
  /** Keep the folder (logs, certificates, etcd data) after stop; default: JOBHARVEST_KEEP_CLUSTER=1. */
  keep?: boolean;
  startTimeoutMs?: number;
  log?: (line: string) => void;
}

/** Everything a test needs to talk to the cluster. Plain data, so vitest can `provide` it. */
export interface ClusterInfo {
  /** https://127.0.0.1:PORT */
  server: string;
  /** Bearer token of a member of system:masters. */
  token: string;
  /** PEM of the CA that signed the API server's serving certificate. */
  caPem: string;
  /** A kubeconfig for the admin identity (kubectl, helm, client libraries). */
  kubeconfigPath: string;
  /** ca.crt, ca.key (to sign client or webhook certificates), apiserver.crt/key, sa.pub/key. */
  certsDir: string;
  /** One log file per process. */
  logsDir: string;
  /** The cluster's temporary folder. */
  dir: string;
  etcdUrl: string;
  versions: Versions;
  /** The helm binary built with the cluster, for chart tests. */
  helmPath: string;
}

export interface StopOptions {
  /** A failing run keeps the logs and certificates; etcd's data goes unless `keep` was asked for. */
  failed?: boolean;
}

export interface StopResult {
  /** The folder left on disk, if any. */
  keptDir: string | undefined;
}

export interface Cluster extends ClusterInfo {
  processes: ManagedProcess[];
  stop(opts?: StopOptions): Promise<StopResult>;
}

function token(): string {
  return randomBytes(24).toString('hex');
}

/** Start failures caused by a port that another process took between probe and bind. */
class PortClash extends Error {}

const START_ATTEMPTS = 3;

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(opts, attempt < START_ATTEMPTS);
    } catch (err) {
      if (!(err instanceof PortClash)) throw err;
      (opts.log ?? ((line: string) => console.error(line)))(`test cluster: ${err.message}; retrying with new ports`);
    }
  }
}

async function startOnce(opts: ClusterOptions, mayRetry: boolean): Promise<Cluster> {
  const bins = locateBinaries(opts.binDir);
  const log = opts.log ?? ((line: string) => console.error(line));
  const keep = opts.keep ?? process.env.JOBHARVEST_KEEP_CLUSTER === '1';
  const timeoutMs = opts.startTimeoutMs ?? 180_000;
  const controllers = opts.controllers ?? DEFAULT_CONTROLLERS;

  const dir = await mkdtemp(join(opts.tmpRoot ?? tmpdir(), 'jobharvest-cluster-'));
  const logsDir = join(dir, 'logs');
  const etcdDataDir = join(dir, 'etcd-data');
  const pidFile = join(dir, 'pids');
  await mkdir(logsDir);
  await mkdir(etcdDataDir, { mode: 0o700 });

  const processes: ManagedProcess[] = [];
  const watchdog = startWatchdog(pidFile, etcdDataDir);
  let stopped: Promise<StopResult> | undefined;

  const unregisterExit = onRunnerExit(() => {
    // The processes are already killed by the exit hook; only files remain.
    if (keep) return;
    rmSync(etcdDataDir, { recursive: true, force: true });
    process.stderr.write(`test cluster interrupted; its logs are in ${logsDir}\n`);
  });

  const stop = (stopOpts: StopOptions = {}): Promise<StopResult> => {
    stopped ??= (async () => {
      // Reverse start order: controllers first, etcd last, so nothing logs
      // errors about a backend that went away before it did.
      for (const p of [...processes].reverse()) await p.stop();
      await watchdog.stop();
      unregisterExit();
      if (keep) {
        log(`test cluster kept in ${dir} (logs in ${logsDir})`);
        return { keptDir: dir };
      }
      if (stopOpts.failed === true) {
        await rm(etcdDataDir, { recursive: true, force: true });
        log(`test cluster logs kept for the failed run: ${logsDir}`);
        return { keptDir: dir };
      }
      await rm(dir, { recursive: true, force: true });
      return { keptDir: undefined };
    })();
    return stopped;
  };

  const launch = (name: string, binary: string, args: string[]): ManagedProcess => {
    const p = startProcess(name, binary, args, join(logsDir, `${name}.log`));
    processes.push(p);
    if (p.pid > 0) appendFileSync(pidFile, `${p.pid}\n`);
    return p;
  };

  const diedWhileStarting = (p: ManagedProcess) => () =>
    p.exit === undefined ? undefined : `${p.name} ${describeExit(p.exit)}; last log lines:\n${p.logTail()}`;

  try {
    const [etcdClientPort, etcdPeerPort, apiPort, kcmPort] = (await freePorts(4)) as [number, number, number, number];
    const pki = await createPki(join(dir, 'certs'), SERVICE_IP);
    const kubeletClient = await createKubeletClientCert(pki);
    const etcdUrl = `http://127.0.0.1:${etcdClientPort}`;
    const etcdPeerUrl = `http://127.0.0.1:${etcdPeerPort}`;
    const server = `https://127.0.0.1:${apiPort}`;

    const etcd = launch('etcd', bins.etcd, [
      '--name=default',
      `--data-dir=${etcdDataDir}`,
      `--listen-client-urls=${etcdUrl}`,
      `--advertise-client-urls=${etcdUrl}`,
      // Set explicitly: the default peer port 2380 would clash between clusters.
      `--listen-peer-urls=${etcdPeerUrl}`,
      `--initial-advertise-peer-urls=${etcdPeerUrl}`,
      `--initial-cluster=default=${etcdPeerUrl}`,
      // Throwaway data: fsync only costs time on a shared disk.
      '--unsafe-no-fsync=true',
      '--log-level=warn',
    ]);
    await waitFor(
      'etcd /health',
      async () => {
        const res = await httpCall(`${etcdUrl}/health`, { timeoutMs: 2_000 });
        return res.status === 200 && (JSON.parse(res.body) as { health?: string }).health === 'true' ? true : undefined;
      },
      { timeoutMs, abortIf: diedWhileStarting(etcd) },
    );

    const adminToken = token();
    const kcmToken = token();
    const tokensFile = join(dir, 'tokens.csv');
    // Both identities are in system:masters: the controller manager's own RBAC
    // role expects --use-service-account-credentials, which adds nothing here.
    await writeFile(
      tokensFile,
      `${adminToken},${ADMIN_USER},${ADMIN_USER},"system:masters"\n` +
        `${kcmToken},${CONTROLLER_MANAGER_USER},${CONTROLLER_MANAGER_USER},"system:masters"\n`,
      { mode: 0o600 },
    );

    const apiserver = launch('kube-apiserver', bins.kubeApiserver, [
      // The machine may have no default route; the API server would fail to pick an address.
      '--advertise-address=127.0.0.1',
      '--bind-address=127.0.0.1',
      `--secure-port=${apiPort}`,
      `--etcd-servers=${etcdUrl}`,
      `--cert-dir=${pki.dir}`,
      `--tls-cert-file=${pki.servingCertPath}`,
      `--tls-private-key-file=${pki.servingKeyPath}`,
      `--client-ca-file=${pki.caCertPath}`,
      `--token-auth-file=${tokensFile}`,
      '--authorization-mode=RBAC',
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${pki.serviceAccountPublicKeyPath}`,
      `--service-account-signing-key-file=${pki.serviceAccountPrivateKeyPath}`,
      '--allow-privileged=true',
      // The endpoint reconciler would publish 127.0.0.1 as the `kubernetes`
      // Service's endpoint, which endpoint validation rejects as loopback.
      '--endpoint-reconciler-type=none',
      '--profiling=false',
      // pods/log, exec and port-forward go to a kubelet (test/harness/kubelet): the API
      // server proves itself with a client certificate and checks the kubelet's
      // serving certificate against the cluster CA, at the node's InternalIP.
      `--kubelet-client-certificate=${kubeletClient.certPath}`,
      `--kubelet-client-key=${kubeletClient.keyPath}`,
      `--kubelet-certificate-authority=${pki.caCertPath}`,
      '--kubelet-preferred-address-types=InternalIP',
      ...(opts.apiServerFlags ?? []),
    ]);
    await waitFor(
      'kube-apiserver /readyz',
      async () => {
        const res = await httpCall(`${server}/readyz`, { caPem: pki.caPem, token: adminToken, timeoutMs: 5_000 });
        return res.status === 200 ? true : undefined;
      },
      { timeoutMs, intervalMs: 500, abortIf: diedWhileStarting(apiserver) },
    );

    const kubeconfigPath = join(dir, 'kubeconfig');
    await writeKubeconfig(kubeconfigPath, { server, caPem: pki.caPem, user: ADMIN_USER, token: adminToken });

    if (controllers.length > 0) {
      const kcmKubeconfig = join(dir, 'kube-controller-manager.kubeconfig');
      await writeKubeconfig(kcmKubeconfig, { server, caPem: pki.caPem, user: CONTROLLER_MANAGER_USER, token: kcmToken });
      const kcm = launch('kube-controller-manager', bins.kubeControllerManager, [
        `--kubeconfig=${kcmKubeconfig}`,
        `--controllers=${controllers.join(',')}`,
        // One instance: leader election only delays the start by a lease period.
        '--leader-elect=false',
        '--bind-address=127.0.0.1',
        `--secure-port=${kcmPort}`,
        `--service-account-private-key-file=${pki.serviceAccountPrivateKeyPath}`,
        `--root-ca-file=${pki.caCertPath}`,
        '--profiling=false',
        ...(opts.controllerManagerFlags ?? []),
      ]);
      if (controllers.includes('serviceaccount-controller')) {
        // The default ServiceAccount appears once the controllers run; before
        // that every pod creation would be refused by ServiceAccount admission.
        await waitFor(
          'the default ServiceAccount (kube-controller-manager running)',
          async () => {
            const res = await httpCall(`${server}/api/v1/namespaces/default/serviceaccounts/default`, {
              caPem: pki.caPem,
              token: adminToken,
            });
            return res.status === 200 ? true : undefined;
          },
          { timeoutMs, intervalMs: 500, abortIf: diedWhileStarting(kcm) },
        );
      }
    }

    return {
      server,
      token: adminToken,
      caPem: pki.caPem,
      kubeconfigPath,
      certsDir: pki.dir,
      logsDir,
      dir,
      etcdUrl,
      versions: bins.versions,
      helmPath: bins.helm,
      processes,
      stop,
    };
  } catch (err) {
    // Free ports are probed, then bound by the child: with other test runs on
    // the machine, one may be taken in between. That is no failure of ours.
    const clash = processes.find((p) => p.exit !== undefined && /address already in use/.test(p.logTail(200)));
    if (clash !== undefined && mayRetry) {
      await stop();
      throw new PortClash(`${clash.name} found its port taken`, { cause: err });
    }
    await stop({ failed: true });
    const logs = processes.map((p) => `  ${p.logPath}`).join('\n');
    throw new Error(`${(err as Error).message}\nprocess logs:\n${logs}`, { cause: err });
  }
}
