/**
 * A real Kubernetes node on this machine: containerd 2.x with runc and the
 * bridge CNI plugin, the kubelet and kube-proxy, built by build.sh, against
 * the test control plane of test/harness/cluster, plus kube-scheduler.
 *
 * The kubelet refuses a loopback node IP, and must not take the machine's own
 * address, so the node lives in a network namespace of its own, joined to the
 * root namespace by a veth pair with addresses no other interface has:
 *
 *   root namespace  10.213.S.1/30 ── veth ── 10.213.S.2/30  node namespace
 *                                            bridge jhbrS, pods in 10.213.(S+1).0/24
 *
 * (S = 2 × slot; a slot is taken by creating its veth, so two nodes on one
 * machine get different ones). Nothing routes beyond: the node namespace has
 * no default route, the root namespace only a route back to the pod range
 * over the veth, and there is no masquerade. The control plane listens on
 * 127.0.0.1 only; `expose(port)` forwards HOST_IP:port there, for the API
 * server (kubelet, kube-proxy, pods through the `kubernetes` Service) and for
 * the log servers the pods ship to.
 *
 * Only the network namespace is separate (nsenter --net): the kubelet's volume
 * mounts must be seen by containerd, and both by the machine, so everything
 * the node mounts is unmounted by cleanup.sh, which also undoes every other
 * change recorded in the node folder's `undo` file. stop() runs it, and so do
 * the runner's exit hook and a watchdog that outlives a killed runner.
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, symlink, writeFile } from 'node:fs/promises';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { generate } from 'selfsigned';
import { generateServing } from '../../../src/tls/generate.ts';
import { onRunnerExit, startProcess, describeExit, type ManagedProcess } from '../../support/process.ts';
import { freePorts } from '../../support/ports.ts';
import { waitFor } from '../../support/wait.ts';
import type { ClusterInfo } from '../cluster/harness.ts';
import { selectedKubernetes } from '../versions/select.ts';
import { buildImages, PAUSE_IMAGE, type BuiltImages } from './images.ts';

const run = promisify(execFile);
const HERE = fileURLToPath(new URL('.', import.meta.url));
export const NODE_BIN = resolve(HERE, 'bin');
const CLEANUP = join(HERE, 'cleanup.sh');

/**
 * The node's Kubernetes binaries: the default pins in bin/, or the release the
 * version matrix selected (versions/select.ts). containerd, runc, the CNI
 * plugins, pause and kubectl are always bin/'s.
 */
function kubeBinary(name: 'kubelet' | 'kube-proxy' | 'kube-scheduler'): string {
  return join(selectedKubernetes()?.dir ?? NODE_BIN, name);
}

/** Where the webhook's node mode expects the kubelet's pod logs. */
export const HOST_POD_LOGS = '/var/log/pods';
const CACHE = process.env.JOBHARVEST_CACHE ?? join(process.env.HOME ?? '/root', '.cache/jobharvest');
/**
 * One real node per machine at a time (see startNodeWatchdog). A fixed path,
 * not under JOBHARVEST_CACHE: two runs with different caches (a cold CI run
 * next to a warm one) share the same host paths, cgroups and iptables, so
 * they must share the lock too. /run is a tmpfs: the file goes at reboot.
 */
export const NODE_LOCK = '/run/lock/jobharvest-node.lock';

/** Global sysctls the kubelet (or the runtime) is known to write; cleanup.sh puts back what they were. */
export const WATCHED_SYSCTLS = [
  'vm.overcommit_memory',
  'vm.panic_on_oom',
  'kernel.panic',
  'kernel.panic_on_oops',
  'kernel.keys.root_maxkeys',
  'kernel.keys.root_maxbytes',
];

/**
 * Paths outside the node folder that the kubelet, containerd or the CNI
 * plugins write to whatever their configuration says. Whatever appears below
 * them while the node runs is deleted when it stops.
 */
export const FIXED_PATHS = [
  '/run/containerd',
  '/run/netns',
  '/var/lib/kubelet',
  '/var/log/containers',
  '/var/log/pods',
  '/var/lib/cni',
  '/run/cni',
  '/usr/libexec/kubernetes',
  '/var/run/nri',
  '/run/nri',
  '/etc/cni',
  '/opt/cni',
  '/var/lib/containerd',
  '/etc/containerd',
];

export interface NodeOptions {
  cluster: Pick<ClusterInfo, 'server' | 'certsDir' | 'caPem' | 'kubeconfigPath'>;
  /** Kubelet containerLogMaxSize; small, so that tests see the kubelet rotate. */
  containerLogMaxSize?: string;
  /**
   * Kubelet containerLogMaxFiles; 3 by default. With 2 the kubelet deletes
   * the one rotated file before each rotation and never compresses one.
   */
  containerLogMaxFiles?: number;
  log?: (line: string) => void;
  /** Keep the node folder after stop (logs, configs). */
  keep?: boolean;
}

export interface RealNode {
  name: string;
  /** The node's InternalIP, in its network namespace. */
  nodeIp: string;
  /** The root namespace's end of the veth: what pods and the node reach the machine by. */
  hostIp: string;
  podCidr: string;
  netns: string;
  dir: string;
  /** The kubelet's podLogsDir. */
  podLogsDir: string;
  /**
   * containerd's registry config_path: a `<registry host>/hosts.toml` written
   * here (at any time; containerd reads it at each pull) sends the node's
   * pulls from that registry where it says.
   */
  registryConfigDir: string;
  images: BuiltImages;
  processes: ManagedProcess[];
  /** Forwards hostIp:port to 127.0.0.1:port (a server of the tests), until stop; once per port. */
  expose(port: number): Promise<string>;
  /**
   * A network outage between the node's pods and an exposed port (the API
   * server's, say) for `ms`: every TCP connection from a pod is reset and new
   * ones are refused with an RST until the time is up. The kubelet's and
   * kube-proxy's own connections (from the node IP) stay up. Resolves when
   * the outage ends, with the counts of connections reset and refused.
   */
  cutPodConnections(port: number, ms: number): Promise<{ reset: number; refused: number }>;
  /** A command run in the node's network namespace. */
  nsExec(cmd: string, args: string[]): Promise<string>;
  /**
   * The node lost at once, as after a power cut: SIGKILL to the kubelet,
   * containerd, the shims and every container, all in one go. Its files stay
   * (the container logs above all) until stop().
   */
  crash(): void;
  stop(opts?: { failed?: boolean }): Promise<void>;
}

/** Why a real node cannot start here, or undefined when it can. */
export function nodeUnavailableReason(): string | undefined {
  if (process.platform !== 'linux') return `a real node needs Linux, not ${process.platform}`;
  if (process.getuid?.() !== 0) return 'a real node needs root (network namespaces, mounts, cgroups, runc)';
  for (const bin of ['kubelet', 'kube-proxy', 'kube-scheduler', 'containerd', 'containerd-shim-runc-v2', 'ctr', 'pause', 'runc', 'cni/bridge']) {
    if (!existsSync(join(NODE_BIN, bin))) return `test/harness/node/bin/${bin} is missing: run \`npm run node:build\``;
  }
  try {
    selectedKubernetes();
  } catch (err) {
    return (err as Error).message;
  }
  for (const tool of ['nsenter', 'ip', 'iptables-save', 'tac']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `${tool} is missing (util-linux, iproute2, iptables)`;
    }
  }
  return undefined;
}

function sh(line: string): string {
  return `'${line.replace(/'/g, `'\\''`)}'`;
}

async function clientCert(certsDir: string, cn: string, org?: string): Promise<{ cert: string; key: string }> {
  const [caCert, caKey] = await Promise.all([readFile(join(certsDir, 'ca.crt'), 'utf8'), readFile(join(certsDir, 'ca.key'), 'utf8')]);
  const now = Date.now();
  const pems = await generate(
    [{ name: 'commonName', value: cn }, ...(org === undefined ? [] : [{ name: 'organizationName', value: org }])],
    {
      keyType: 'ec',
      algorithm: 'sha256',
      notBeforeDate: new Date(now - 60_000),
      notAfterDate: new Date(now + 2 * 24 * 3600 * 1000),
      ca: { key: caKey, cert: caCert },
      extensions: [
        { name: 'basicConstraints', cA: false },
        { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
        { name: 'extKeyUsage', clientAuth: true },
      ],
    },
  );
  return { cert: pems.cert, key: pems.private };
}

/** A veth pair whose root end names its slot: creating it is what claims the slot. */
async function claimSlot(nodeNs: string): Promise<number> {
  for (let slot = 0; slot < 32; slot++) {
    try {
      await run('ip', ['link', 'add', `jhn${slot}h`, 'type', 'veth', 'peer', 'name', `jhn${slot}n`, 'netns', nodeNs]);
      return slot;
    } catch (err) {
      if (!/exists/i.test((err as { stderr?: string }).stderr ?? '')) throw err;
    }
  }
  throw new Error('no free veth slot (jhn0h … jhn31h all exist)');
}

interface Forwarder {
  readonly server: Server;
  /** Resets the connections `from` matches and refuses (RST) new ones from it for `ms`. */
  cut(from: (address: string) => boolean, ms: number): Promise<{ reset: number; refused: number }>;
}

/** A TCP forwarder listening on host:port, to 127.0.0.1:port. */
function forward(host: string, port: number): Promise<Forwarder> {
  const pairs = new Set<{ inbound: Socket; outbound: Socket }>();
  let refuse: ((address: string) => boolean) | undefined;
  let refused = 0;
  const server = createServer((inbound) => {
    if (refuse?.(inbound.remoteAddress ?? '')) {
      refused++;
      inbound.resetAndDestroy();
      return;
    }
    const outbound = connect(port, '127.0.0.1');
    const pair = { inbound, outbound };
    pairs.add(pair);
    const close = () => {
      inbound.destroy();
      outbound.destroy();
      pairs.delete(pair);
    };
    inbound.on('error', close).on('close', close);
    outbound.on('error', close).on('close', close);
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  server.on('close', () => {
    for (const { inbound, outbound } of pairs) {
      inbound.destroy();
      outbound.destroy();
    }
  });
  const cut = async (from: (address: string) => boolean, ms: number) => {
    let reset = 0;
    refused = 0;
    refuse = from;
    for (const pair of [...pairs]) {
      if (!from(pair.inbound.remoteAddress ?? '')) continue;
      reset++;
      // An RST to the client, as a broken network path would end up giving it.
      pair.inbound.resetAndDestroy();
      pair.outbound.destroy();
      pairs.delete(pair);
    }
    await new Promise((r) => setTimeout(r, ms));
    refuse = undefined;
    return { reset, refused };
  };
  return new Promise((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolveListen({ server, cut }));
  });
}

function startNodeWatchdog(dir: string): ManagedProcess {
  // Survives a runner killed outright (SIGKILL, OOM): it notices within a
  // second and undoes the node. A stop() kills it after its own cleanup.
  // It also holds the machine's node lock for the node's whole life: two nodes
  // share /var/log/pods and the paths of FIXED_PATHS, and one's cleanup would
  // delete what the other still uses. It writes `locked` once it has it.
  const script = [
    'runner=$1; cleanup=$2; dir=$3; lock=$4',
    'exec 9>"$lock"',
    'flock 9',
    ': > "$dir/locked"',
    'while kill -0 "$runner" 2>/dev/null; do sleep 1; done',
    'bash "$cleanup" "$dir"',
  ].join('\n');
  mkdirSync(dirname(NODE_LOCK), { recursive: true });
  const child = spawn('bash', ['-c', script, 'jobharvest-node-watchdog', String(process.pid), CLEANUP, dir, NODE_LOCK], { detached: true, stdio: 'ignore' });
  child.unref();
  const pid = child.pid ?? -1;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.once('exit', (code, signal) => r({ code, signal })));
  return {
    name: 'node-watchdog',
    pid,
    logPath: '',
    exit: undefined,
    exited,
    async stop() {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
      return exited;
    },
    logTail: () => '',
  };
}

export async function startNode(opts: NodeOptions): Promise<RealNode> {
  const reason = nodeUnavailableReason();
  if (reason !== undefined) throw new Error(reason);
  const log = opts.log ?? ((line: string) => console.error(line));
  const dir = await mkdtemp(join(tmpdir(), 'jobharvest-node-'));
  await chmod(dir, 0o755);
  const logsDir = join(dir, 'logs');
  await mkdir(logsDir);
  const undoFile = join(dir, 'undo');
  const pidFile = join(dir, 'pids');
  const undo = (line: string) => appendFileSync(undoFile, `${line}\n`);
  const processes: ManagedProcess[] = [];
  const servers: Server[] = [];
  const watchdog = startNodeWatchdog(dir);
  const runCleanup = (keep: boolean) => execFileSync('bash', [CLEANUP, dir, ...(keep ? ['keep'] : [])], { stdio: 'ignore' });
  const unregisterExit = onRunnerExit(() => runCleanup(false));

  let stopped: Promise<void> | undefined;
  const stop = (stopOpts: { failed?: boolean } = {}): Promise<void> => {
    stopped ??= (async () => {
      for (const s of servers) s.close();
      // The kubelet first, so that it does not restart what the runtime loses.
      for (const p of [...processes].reverse()) await p.stop(5_000);
      const keep = opts.keep === true || stopOpts.failed === true;
      runCleanup(keep);
      await watchdog.stop();
      unregisterExit();
      if (keep) log(`real node kept in ${dir} (logs in ${logsDir})`);
    })();
    return stopped;
  };

  const launch = (name: string, binary: string, args: string[], netns: string | undefined): ManagedProcess => {
    // containerd finds its shim, and the shim runc, on PATH.
    const path = `PATH=${NODE_BIN}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}`;
    const [cmd, argv] =
      netns === undefined ? [binary, args] : ['nsenter', [`--net=/run/netns/${netns}`, '--', 'env', path, binary, ...args]];
    const p = startProcess(name, cmd, argv, join(logsDir, `${name}.log`));
    processes.push(p);
    if (p.pid > 0) appendFileSync(pidFile, `${p.pid}\n`);
    return p;
  };
  const diedWhileStarting = (p: ManagedProcess) => () =>
    p.exit === undefined ? undefined : `${p.name} ${describeExit(p.exit)}; last log lines:\n${p.logTail(30)}`;

  try {
    const lockWaitStarted = Date.now();
    let waitingSaid = false;
    await waitFor(
      'the real-node lock (another real node runs on this machine)',
      () => {
        if (existsSync(join(dir, 'locked'))) return true;
        if (!waitingSaid && Date.now() - lockWaitStarted > 2_000) {
          log(`real node: waiting for ${NODE_LOCK}, held by another real node on this machine`);
          waitingSaid = true;
        }
        return undefined;
      },
      { timeoutMs: 15 * 60_000, intervalMs: 250 },
    );

    // What the machine looks like before: the undo lines put it back.
    for (const key of WATCHED_SYSCTLS) {
      const path = `/proc/sys/${key.replace(/\./g, '/')}`;
      if (existsSync(path)) undo(`echo ${sh(readFileSync(path, 'utf8').trim())} > ${path}`);
    }
    for (const path of FIXED_PATHS) {
      if (!existsSync(path)) {
        undo(`remove_new_entries ${path} absent`);
      } else {
        const listing = join(dir, `before${path.replace(/\//g, '_')}`);
        writeFileSync(listing, readdirSync(path).join('\n') + '\n');
        undo(`remove_new_entries ${path} ${listing}`);
      }
    }

    // util-linux's utab folder, which the first mount or umount creates;
    // cleanup.sh's own umounts would recreate it, so it goes last, if empty.
    if (!existsSync('/run/mount')) writeFileSync(join(dir, 'run-mount-absent'), '');

    const nsName = `jobharvest-node-${randomBytes(4).toString('hex')}`;
    undo(`ip netns delete ${nsName}`);
    await run('ip', ['netns', 'add', nsName]);
    const slot = await claimSlot(nsName);
    undo(`ip link delete jhn${slot}h`);
    const hostIp = `10.213.${slot * 2}.1`;
    const nodeIp = `10.213.${slot * 2}.2`;
    const podCidr = `10.213.${slot * 2 + 1}.0/24`;
    const name = `jobharvest-node-${slot}`;
    const inNs = (args: string[]) => run('ip', ['netns', 'exec', nsName, ...args]);
    await run('ip', ['addr', 'add', `${hostIp}/30`, 'dev', `jhn${slot}h`]);
    await run('ip', ['link', 'set', `jhn${slot}h`, 'up']);
    await inNs(['ip', 'link', 'set', 'lo', 'up']);
    await inNs(['ip', 'addr', 'add', `${nodeIp}/30`, 'dev', `jhn${slot}n`]);
    await inNs(['ip', 'link', 'set', `jhn${slot}n`, 'up']);
    // Service IPs are translated by kube-proxy in OUTPUT, after the route
    // lookup, so the node needs a route for the range; it leads only to the veth.
    await inNs(['ip', 'route', 'add', '10.0.0.0/24', 'via', hostIp]);
    await run('ip', ['route', 'add', podCidr, 'via', nodeIp, 'dev', `jhn${slot}h`]);

    const cgroupRoot = `/${name}`;
    writeFileSync(join(dir, 'cgroup-root'), cgroupRoot);
    for (const entry of readdirSync('/sys/fs/cgroup', { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const path = join('/sys/fs/cgroup', entry.name, name);
      if (existsSync(path)) continue;
      undo(`remove_cgroup_tree ${path}`);
      await mkdir(path);
      // A v1 cpuset cgroup starts with no CPUs and memory nodes: copy the parent's.
      for (const f of ['cpuset.cpus', 'cpuset.mems']) {
        const parent = join('/sys/fs/cgroup', entry.name, f);
        if (existsSync(parent)) writeFileSync(join(path, f), readFileSync(parent, 'utf8'));
      }
    }

    const exposed = new Map<number, Forwarder>();
    const expose = async (port: number): Promise<string> => {
      if (!exposed.has(port)) {
        const f = await forward(hostIp, port);
        servers.push(f.server);
        exposed.set(port, f);
      }
      return `${hostIp}:${port}`;
    };
    // Pods connect from their own addresses: no masquerade on this node.
    const podPrefix = `10.213.${slot * 2 + 1}.`;
    const fromPod = (address: string) => address.replace(/^::ffff:/, '').startsWith(podPrefix);
    const cutPodConnections = async (port: number, ms: number) => {
      const f = exposed.get(port);
      if (f === undefined) throw new Error(`port ${port} is not exposed to the node`);
      return f.cut(fromPod, ms);
    };
    const apiPort = Number(new URL(opts.cluster.server).port);
    await expose(apiPort);

    // Certificates: the kubelet's serving one for its IP, client ones per component.
    const certs = join(dir, 'certs');
    await mkdir(certs, { mode: 0o700 });
    const caPath = join(opts.cluster.certsDir, 'ca.crt');
    const [caCert, caKey] = [readFileSync(caPath, 'utf8'), readFileSync(join(opts.cluster.certsDir, 'ca.key'), 'utf8')];
    const serving = await generateServing({ cert: caCert, key: caKey }, { dnsNames: [name], ipAddresses: [nodeIp], leafDays: 2 });
    await writeFile(join(certs, 'kubelet.crt'), serving.cert);
    await writeFile(join(certs, 'kubelet.key'), serving.key, { mode: 0o600 });
    const kubeconfigFor = async (component: string, cn: string, org: string | undefined, server: string) => {
      const c = await clientCert(opts.cluster.certsDir, cn, org);
      const path = join(dir, `${component}.kubeconfig`);
      await writeFile(join(certs, `${component}.crt`), c.cert);
      await writeFile(join(certs, `${component}.key`), c.key, { mode: 0o600 });
      // The API server's certificate names 127.0.0.1 and `kubernetes`, not the
      // veth address: tls-server-name checks it against the name instead.
      await writeFile(
        path,
        [
          'apiVersion: v1',
          'kind: Config',
          'clusters:',
          '- name: test',
          '  cluster:',
          `    server: ${server}`,
          `    certificate-authority: ${caPath}`,
          ...(server.includes('127.0.0.1') ? [] : ['    tls-server-name: kubernetes']),
          'users:',
          `- name: ${component}`,
          '  user:',
          `    client-certificate: ${join(certs, `${component}.crt`)}`,
          `    client-key: ${join(certs, `${component}.key`)}`,
          'contexts:',
          `- name: test`,
          '  context:',
          '    cluster: test',
          `    user: ${component}`,
          'current-context: test',
          '',
        ].join('\n'),
      );
      return path;
    };
    const nodeServer = `https://${hostIp}:${apiPort}`;
    const kubeletKubeconfig = await kubeconfigFor('kubelet-client', `system:node:${name}`, 'system:nodes', nodeServer);
    const proxyKubeconfig = await kubeconfigFor('kube-proxy', 'system:kube-proxy', undefined, nodeServer);
    const schedulerKubeconfig = await kubeconfigFor('kube-scheduler', 'system:kube-scheduler', undefined, opts.cluster.server);

    // The bootstrap policy binds system:node-proxier and system:kube-scheduler
    // to their users; system:node is left to the Node authorizer, which this
    // control plane (RBAC only) does not run, so bind it to the node group.
    const kubectl = (args: string[], input?: string) =>
      new Promise<string>((res, rej) => {
        const child = execFile(join(NODE_BIN, 'kubectl'), ['--kubeconfig', opts.cluster.kubeconfigPath, '--cache-dir', join(dir, 'kubectl-cache'), ...args], (err, stdout, stderr) =>
          err ? rej(new Error(`kubectl ${args.join(' ')}: ${stderr || err.message}`)) : res(stdout),
        );
        if (input !== undefined) child.stdin?.end(input);
      });
    await kubectl(['apply', '-f', '-'], NODE_RBAC);
    // The `kubernetes` Service has no endpoints (the harness runs no endpoint
    // reconciler, since 127.0.0.1 is not a valid endpoint): point it at the veth.
    await kubectl(['apply', '-f', '-'], kubernetesEndpointSlice(hostIp, apiPort));

    // Images, before containerd starts: the sandbox image must be present
    // before the kubelet creates its first pod sandbox.
    const images = await buildImages({ dir: join(dir, 'images'), pauseBinary: join(NODE_BIN, 'pause'), debCache: join(CACHE, 'node-debs') });

    const ctrdDir = join(dir, 'containerd');
    await mkdir(ctrdDir);
    await mkdir(join(ctrdDir, 'certs.d'));
    const sock = join(ctrdDir, 'containerd.sock');
    const cniConfDir = join(dir, 'cni', 'net.d');
    await mkdir(cniConfDir, { recursive: true });
    await writeFile(join(cniConfDir, '10-jobharvest.conflist'), JSON.stringify(cniConfig(`jhbr${slot}`, podCidr, join(dir, 'cni', 'ipam'))));
    await writeFile(join(ctrdDir, 'config.toml'), containerdConfig(ctrdDir, cniConfDir));
    const containerd = launch('containerd', join(NODE_BIN, 'containerd'), ['--config', join(ctrdDir, 'config.toml')], nsName);
    const ctr = (args: string[]) => run(join(NODE_BIN, 'ctr'), ['--address', sock, '--namespace', 'k8s.io', ...args], { maxBuffer: 1 << 24 });
    await waitFor(
      'containerd',
      async () => {
        try {
          await ctr(['version']);
          return true;
        } catch {
          return undefined;
        }
      },
      { timeoutMs: 60_000, intervalMs: 300, abortIf: diedWhileStarting(containerd) },
    );
    for (const image of [images.pause, images.busybox, images.jobharvest]) await ctr(['images', 'import', image.archive]);

    const kubeletDir = join(dir, 'kubelet');
    const podLogsDir = join(dir, 'pod-logs');
    await mkdir(kubeletDir);
    // The webhook mounts the kubelet's default podLogsDir, /var/log/pods, into
    // node-mode sidecars (src/core/inject.ts). The kubelet writes under the
    // node folder, and /var/log/pods points there while the node runs (the
    // undo line of FIXED_PATHS removes it); a machine whose /var/log/pods is
    // real cannot host this node's node-mode tests.
    if (existsSync(HOST_POD_LOGS)) throw new Error(`${HOST_POD_LOGS} exists on this machine; the real node needs it free to point it at its own podLogsDir`);
    await mkdir(podLogsDir, { mode: 0o750 });
    await symlink(podLogsDir, HOST_POD_LOGS);
    await writeFile(
      join(dir, 'kubelet-config.yaml'),
      kubeletConfig({
        nodeIp,
        cgroupRoot,
        sock,
        podLogsDir,
        volumePluginDir: join(dir, 'volume-plugins'),
        certs,
        caPath,
        maxSize: opts.containerLogMaxSize ?? '1Mi',
        maxFiles: opts.containerLogMaxFiles ?? 3,
      }),
    );
    const kubelet = launch(
      'kubelet',
      kubeBinary('kubelet'),
      [
        `--config=${join(dir, 'kubelet-config.yaml')}`,
        `--kubeconfig=${kubeletKubeconfig}`,
        `--root-dir=${kubeletDir}`,
        `--node-ip=${nodeIp}`,
        `--hostname-override=${name}`,
        '--v=2',
      ],
      nsName,
    );
    const [proxyHealthz, proxyMetrics, schedulerPort] = (await freePorts(3)) as [number, number, number];
    await writeFile(join(dir, 'kube-proxy-config.yaml'), kubeProxyConfig({ kubeconfig: proxyKubeconfig, name, podCidr, proxyHealthz, proxyMetrics }));
    launch('kube-proxy', kubeBinary('kube-proxy'), [`--config=${join(dir, 'kube-proxy-config.yaml')}`], nsName);
    launch(
      'kube-scheduler',
      kubeBinary('kube-scheduler'),
      [
        `--kubeconfig=${schedulerKubeconfig}`,
        `--authentication-kubeconfig=${schedulerKubeconfig}`,
        `--authorization-kubeconfig=${schedulerKubeconfig}`,
        '--leader-elect=false',
        '--bind-address=127.0.0.1',
        `--secure-port=${schedulerPort}`,
      ],
      undefined,
    );

    await waitFor(
      `node ${name} Ready and untainted`,
      async () => {
        try {
          const node = JSON.parse(await kubectl(['get', 'node', name, '-o', 'json'])) as {
            spec?: { taints?: Array<{ key: string }> };
            status?: { conditions?: Array<{ type: string; status: string }> };
          };
          const ready = node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
          return ready && (node.spec?.taints ?? []).length === 0 ? true : undefined;
        } catch {
          return undefined;
        }
      },
      { timeoutMs: 120_000, intervalMs: 500, abortIf: diedWhileStarting(kubelet) },
    );

    return {
      name,
      nodeIp,
      hostIp,
      podCidr,
      netns: nsName,
      dir,
      podLogsDir,
      registryConfigDir: join(ctrdDir, 'certs.d'),
      images,
      processes,
      expose,
      cutPodConnections,
      nsExec: async (cmd, args) => (await inNs([cmd, ...args])).stdout,
      crash: () => execFileSync('bash', [CLEANUP, dir, 'kill'], { stdio: 'ignore' }),
      stop,
    };
  } catch (err) {
    await stop({ failed: true });
    const logs = processes.map((p) => `  ${p.logPath}`).join('\n');
    throw new Error(`${(err as Error).message}\nnode logs:\n${logs}`, { cause: err });
  }
}

const NODE_RBAC = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: jobharvest-test-nodes
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
`;

function kubernetesEndpointSlice(hostIp: string, port: number): string {
  return `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels:
    kubernetes.io/service-name: kubernetes
    endpointslice.kubernetes.io/managed-by: jobharvest-test-node
addressType: IPv4
endpoints:
- addresses: ["${hostIp}"]
  conditions: {ready: true}
ports:
- name: https
  port: ${port}
  protocol: TCP
`;
}

function cniConfig(bridge: string, podCidr: string, ipamDir: string): object {
  return {
    cniVersion: '1.0.0',
    name: 'jobharvest',
    plugins: [
      {
        type: 'bridge',
        bridge,
        isGateway: true,
        // Pod traffic stays on the machine: no masquerade, and the node
        // namespace has no default route.
        ipMasq: false,
        hairpinMode: true,
        ipam: { type: 'host-local', ranges: [[{ subnet: podCidr }]], routes: [{ dst: '0.0.0.0/0' }], dataDir: ipamDir },
      },
    ],
  };
}

function containerdConfig(dir: string, cniConfDir: string): string {
  return `version = 3
root = '${dir}/root'
state = '${dir}/state'
imports = []

[grpc]
  address = '${dir}/containerd.sock'

[ttrpc]
  address = '${dir}/containerd.sock.ttrpc'

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '${dir}/opt'
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '${PAUSE_IMAGE}'
    # <host>/hosts.toml per registry (RealNode.registryConfigDir), read at each pull.
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '${dir}/certs.d'
  [plugins.'io.containerd.cri.v1.runtime']
    # This VM has no CAP_SYS_RESOURCE: runc cannot lower oom_score_adj, and
    # without this every sandbox fails with "can't get final child's PID from pipe".
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_cdi = false
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '${NODE_BIN}/runc'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['${NODE_BIN}/cni']
      conf_dir = '${cniConfDir}'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
`;
}

function kubeletConfig(c: {
  nodeIp: string;
  cgroupRoot: string;
  sock: string;
  podLogsDir: string;
  volumePluginDir: string;
  certs: string;
  caPath: string;
  maxSize: string;
  maxFiles: number;
}): string {
  return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 and no systemd on this machine kind (KEP-5573 makes 1.35+ refuse v1 otherwise).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: ${c.cgroupRoot}
# No CAP_SYS_RESOURCE: the kubelet cannot lower its own or a pod's OOM score.
oomScoreAdj: 0
protectKernelDefaults: false
failSwapOn: false
containerRuntimeEndpoint: unix://${c.sock}
podLogsDir: ${c.podLogsDir}
containerLogMaxSize: ${c.maxSize}
containerLogMaxFiles: ${c.maxFiles}
volumePluginDir: ${c.volumePluginDir}
address: ${c.nodeIp}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: ${c.certs}/kubelet.crt
tlsPrivateKeyFile: ${c.certs}/kubelet.key
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: ${c.caPath}
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
# No cluster DNS, and pods must not get the machine's resolvers.
resolvConf: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
`;
}

function kubeProxyConfig(c: { kubeconfig: string; name: string; podCidr: string; proxyHealthz: number; proxyMetrics: number }): string {
  return `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ${c.kubeconfig}
mode: iptables
hostnameOverride: ${c.name}
clusterCIDR: ${c.podCidr}
healthzBindAddress: 127.0.0.1:${c.proxyHealthz}
metricsBindAddress: 127.0.0.1:${c.proxyMetrics}
# Zero leaves the machine's conntrack settings as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`;
}
