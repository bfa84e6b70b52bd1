/**
 * A local registry (Debian's docker-registry) on 127.0.0.1, and the
 * configuration that makes Podman's `docker` and buildah use it for the
 * names the Dockerfile and the README use:
 *
 * - registries.conf: one `[[registry]]` per name prefix with a `location`
 *   rewrite to the local registry (never `mirror`s, so there is no fallback
 *   to a public host: a name that is not there fails), short names resolved
 *   on docker.io only;
 * - storage.conf: images under the run's folder (overlay), not the
 *   machine's /var/lib/containers;
 * - containers.conf: RUN steps on the host network (no CNI bridge, no
 *   iptables rules on the machine), runc, cgroupfs, file events.
 *
 * The environment `builderEnv()` returns points podman and buildah at these
 * files (skopeo 1.9 reads only /etc/containers/registries.conf, so the tests
 * give it the registry's own address, never a rewritten name); `bin/docker`
 * is podman-docker's `docker`. SSL_CERT_FILE makes all three, and helm,
 * trust the registry's CA.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { connect, createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, canConnect } from '../../support/ports.ts';
import { startProcess, type ManagedProcess } from '../../support/process.ts';
import { waitFor } from '../../support/wait.ts';
import { LAYOUT_TAG, type StandIns } from './standins.ts';

const run = promisify(execFile);

export interface LocalRegistry {
  port: number;
  /** 127.0.0.1:port */
  address: string;
  /** The CA that signed the registry's certificate (PEM file). */
  caFile: string;
  /** The machine's CA bundle and caFile: SSL_CERT_FILE for Go clients (podman, skopeo, helm). */
  trustBundle: string;
  process: ManagedProcess;
  stop(): Promise<void>;
}

export interface RegistryOptions {
  /** Names and addresses the certificate is for, besides 127.0.0.1. */
  dnsNames?: string[];
  ips?: string[];
}

/** A CA and a serving certificate signed by it, with openssl. */
async function certificates(dir: string, dnsNames: string[], ips: string[]): Promise<{ ca: string; cert: string; key: string }> {
  const ca = join(dir, 'ca.crt');
  const caKey = join(dir, 'ca.key');
  const cert = join(dir, 'registry.crt');
  const key = join(dir, 'registry.key');
  const csr = join(dir, 'registry.csr');
  const ext = join(dir, 'registry.ext');
  await run('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', caKey, '-out', ca, '-days', '2', '-subj', '/CN=jobharvest test registry CA']);
  await run('openssl', ['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr, '-subj', `/CN=${dnsNames[0] ?? '127.0.0.1'}`]);
  const sans = [...dnsNames.map((d) => `DNS:${d}`), ...['127.0.0.1', ...ips].map((i) => `IP:${i}`)].join(',');
  await writeFile(ext, `subjectAltName=${sans}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n`);
  await run('openssl', ['x509', '-req', '-in', csr, '-CA', ca, '-CAkey', caKey, '-CAcreateserial', '-out', cert, '-days', '2', '-extfile', ext]);
  return { ca, cert, key };
}

/** docker-registry on 127.0.0.1, over TLS with a CA of its own. */
export async function startRegistry(dir: string, opts: RegistryOptions = {}): Promise<LocalRegistry> {
  await mkdir(join(dir, 'data'), { recursive: true });
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  const tls = await certificates(dir, opts.dnsNames ?? [], opts.ips ?? []);
  const machineBundle = process.env.SSL_CERT_FILE ?? '/etc/ssl/certs/ca-certificates.crt';
  const trustBundle = join(dir, 'trust.pem');
  await writeFile(trustBundle, `${existsSync(machineBundle) ? await readFile(machineBundle, 'utf8') : ''}\n${await readFile(tls.ca, 'utf8')}`);
  const config = join(dir, 'config.yml');
  await writeFile(
    config,
    `version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: ${join(dir, 'data')}
  delete:
    enabled: true
http:
  addr: ${address}
  tls:
    certificate: ${tls.cert}
    key: ${tls.key}
`,
  );
  const proc = startProcess('docker-registry', '/usr/bin/docker-registry', ['serve', config], join(dir, 'registry.log'));
  await waitFor('the local registry', async () => ((await canConnect(port)) ? true : undefined), { timeoutMs: 30_000, intervalMs: 100, abortIf: () => (proc.exit === undefined ? undefined : 'docker-registry exited') });
  return { port, address, caFile: tls.ca, trustBundle, process: proc, stop: async () => void (await proc.stop()) };
}

export interface Builder {
  /** Environment for podman, buildah, skopeo: PATH with `docker` first, and the configuration files. */
  env: NodeJS.ProcessEnv;
  /** The folder of `docker` (podman-docker). */
  bin: string;
  registriesConf: string;
}

/**
 * The builder's configuration in `dir`. `rewrites` maps name prefixes
 * (`registry.example.com`, `docker.io`) to locations on the local registry.
 */
export async function builderEnv(dir: string, registry: LocalRegistry, rewrites: Record<string, string>): Promise<Builder> {
  await mkdir(dir, { recursive: true });
  const registriesConf = join(dir, 'registries.conf');
  const entries = Object.entries(rewrites).map(
    ([prefix, path]) => `[[registry]]\nprefix = "${prefix}"\nlocation = "${registry.address}${path === '' ? '' : `/${path}`}"\n`,
  );
  await writeFile(registriesConf, `unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n\n${entries.join('\n')}`);
  const storageConf = join(dir, 'storage.conf');
  await writeFile(storageConf, `[storage]\ndriver = "overlay"\ngraphroot = "${join(dir, 'storage')}"\nrunroot = "${join(dir, 'run')}"\n`);
  const containersConf = join(dir, 'containers.conf');
  await writeFile(
    containersConf,
    `[containers]\nnetns = "host"\n\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\nevents_logfile_path = "${join(dir, 'events.log')}"\ntmp_dir = "${join(dir, 'tmp')}"\n`,
  );
  const bin = join(dir, 'bin');
  await mkdir(bin, { recursive: true });
  await symlink('/usr/bin/docker', join(bin, 'docker'));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    CONTAINERS_REGISTRIES_CONF: registriesConf,
    CONTAINERS_STORAGE_CONF: storageConf,
    CONTAINERS_CONF: containersConf,
    // The registry's CA beside the machine's: Go reads SSL_CERT_FILE.
    SSL_CERT_FILE: registry.trustBundle,
    // buildah's own tmp (the build context copies, layer diffs).
    TMPDIR: join(dir, 'tmp'),
  };
  await mkdir(join(dir, 'tmp'), { recursive: true });
  return { env, bin, registriesConf };
}

/** Pushes the stand-ins to the local registry under `<location of their prefix>/<name>`. */
export async function pushStandIns(standIns: StandIns, registry: LocalRegistry, builder: Builder): Promise<void> {
  for (const [layout, name] of [
    [standIns.build, standIns.names.build],
    [standIns.runtime, standIns.names.runtime],
  ] as const) {
    await run('skopeo', ['copy', '--quiet', '--all', `oci:${layout}:${LAYOUT_TAG}`, `docker://${registry.address}/${name}`], { env: builder.env, maxBuffer: 1 << 24 });
  }
}

/**
 * `name` as a reader's registry: a forwarder on a loopback address of its own
 * (127.x.y.1:443) to the registry, and an /etc/hosts that names it, for
 * commands run in a mount namespace of their own with that file bound over
 * /etc/hosts (`inNameNamespace`). The machine's /etc/hosts is not touched.
 */
export interface RegistryName {
  name: string;
  ip: string;
  hostsFile: string;
  server: Server;
  close(): Promise<void>;
}

export async function nameRegistry(dir: string, name: string, registry: LocalRegistry, ip: string): Promise<RegistryName> {
  const hostsFile = join(dir, 'hosts');
  const machine = existsSync('/etc/hosts') ? await readFile('/etc/hosts', 'utf8') : '127.0.0.1 localhost\n';
  await writeFile(hostsFile, `${machine.replace(/\n?$/, '\n')}${ip} ${name}\n`);
  const server = createServer((inbound) => {
    const outbound = connect(registry.port, '127.0.0.1');
    const close = () => {
      inbound.destroy();
      outbound.destroy();
    };
    inbound.on('error', close).on('close', close);
    outbound.on('error', close).on('close', close);
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(443, ip, resolve));
  return { name, ip, hostsFile, server, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** A random loopback address for nameRegistry: 127.<1-254>.<0-255>.1. */
export function randomLoopback(): string {
  return `127.${1 + Math.floor(Math.random() * 254)}.${Math.floor(Math.random() * 256)}.1`;
}

/** argv that runs `command` in bash in a mount namespace of its own whose /etc/hosts is `hostsFile`. */
export function inNameNamespace(hostsFile: string, command: string): string[] {
  return ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', 'mount --bind "$0" /etc/hosts && exec bash -o pipefail -c "$1"', hostsFile, command];
}
