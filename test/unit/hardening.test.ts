import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultConfig, parseConfig } from '../../src/core/config.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { durableConfig, job, optedIn } from '../support/fixtures.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const run = (j: Record<string, any>, config = durableConfig(), ns = optedIn('team-a')) => mutateJob(j, { config, namespace: ns });
const hasSidecar = (j: Record<string, any>) => j.spec?.template?.spec?.initContainers?.[0]?.name === 'jobharvest';
const reasonOf = (r: ReturnType<typeof run>) => (r.decision.action === 'skip' ? r.decision.reason : 'inject');

describe('Windows pods are left unchanged, with a warning', () => {
  const variants: Array<[string, (spec: Record<string, any>) => void]> = [
    ['spec.os.name: windows', (s) => (s.os = { name: 'windows' })],
    ['a nodeSelector on kubernetes.io/os: windows', (s) => (s.nodeSelector = { 'kubernetes.io/os': 'windows' })],
    [
      'a required node affinity on kubernetes.io/os In windows',
      (s) =>
        (s.affinity = {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/os', operator: 'In', values: ['windows'] }] }],
            },
          },
        }),
    ],
  ];
  it.each(variants)('%s', (_what, set) => {
    const j = job();
    set(j.spec.template.spec);
    const r = run(j);
    expect(reasonOf(r)).toBe('windows-pod');
    expect(r.job).toBe(j);
    expect(hasSidecar(r.job)).toBe(false);
    expect(r.job.spec?.ttlSecondsAfterFinished).toBeUndefined();
    expect(r.warnings.join()).toMatch(/Windows/);
  });
  it('still injects a Linux pod', () => {
    const j = job();
    j.spec.template.spec.nodeSelector = { 'kubernetes.io/os': 'linux' };
    j.spec.template.spec.os = { name: 'linux' };
    expect(reasonOf(run(j))).toBe('inject');
  });
});

describe('a sink that keeps nothing sets no TTL', () => {
  it('injects with the default stdout sink but leaves ttlSecondsAfterFinished unset, with a warning', () => {
    const r = run(job(), defaultConfig());
    expect(hasSidecar(r.job)).toBe(true);
    expect(r.job.spec?.ttlSecondsAfterFinished).toBeUndefined();
    expect(JSON.parse(r.job.metadata!.annotations!['jobharvest.io/status']!).ttlSecondsAfterFinished).toBeNull();
    expect(r.warnings.join('\n')).toMatch(/sink stdout keeps the logs only in the pod, so ttlSecondsAfterFinished is not set/);
  });
  it('also when a namespace or Job picks stdout over a durable global sink', () => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/sink': 'stdout' };
    expect(run(j).job.spec?.ttlSecondsAfterFinished).toBeUndefined();
  });
  it('sets the TTL with a durable sink', () => {
    const r = run(job());
    expect(r.job.spec?.ttlSecondsAfterFinished).toBe(3600);
    expect(r.warnings).toEqual([]);
  });
  it('explain says so', () => {
    const r = spawnSync(join(ROOT, 'node_modules/.bin/tsx'), [join(ROOT, 'src/cli/main.ts'), 'explain', '-f', 'examples/job.yaml'], { encoding: 'utf8', cwd: ROOT });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/ttlSecondsAfterFinished=unset \(sink stdout is not durable\)/);
    expect(r.stdout).toMatch(/warning: sink stdout keeps the logs only in the pod/);
  });
});

describe('credentials never reach warnings', () => {
  const secrets: Array<[string, string[]]> = [
    ['http://alice:S3cr@tPassw0rd@logs', ['S3cr', 'tPassw0rd', 'alice']],
    ['http://alice:pass word@logs:8080/x', ['pass', 'word', 'alice']],
    ['http://alice:pa/ss@logs', ['pa/ss', 'alice']],
  ];
  it.each(secrets)('hides the whole userinfo of %s', (endpoint, hidden) => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/endpoint': endpoint };
    const text = run(j).warnings.join('\n');
    expect(text).toMatch(/jobharvest.io\/endpoint=/);
    for (const h of hidden) expect(text).not.toContain(h);
  });

  it.each(['access_token', 'api_key', 'apikey', 'token', 'Secret', 'password', 'sig', 'X-Amz-Signature', 'client_key'])(
    'refuses an endpoint with a query parameter named %s, falls back and hides its value',
    (name) => {
      const j = job();
      j.metadata.annotations = { 'jobharvest.io/endpoint': `https://logs.example.com/ingest?${name}=TOPSECRET&x=1` };
      const r = run(j);
      expect(r.decision.action === 'inject' && r.decision.settings.endpoint).toBe('http://logs.example:8080/ingest');
      const text = r.warnings.join('\n');
      expect(text).toMatch(/looks like a credential/);
      expect(text).not.toContain('TOPSECRET');
      const env = (r.job.spec!.template!.spec!.initContainers![0] as any).env as Array<{ name: string; value?: string }>;
      expect(env.some((e) => e.value?.includes('TOPSECRET'))).toBe(false);
    },
  );

  it('accepts ordinary query parameters', () => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/endpoint': 'https://logs.example.com/ingest?stream=jobs&tenant=a' };
    const r = run(j);
    expect(r.decision.action === 'inject' && r.decision.settings.endpoint).toBe('https://logs.example.com/ingest?stream=jobs&tenant=a');
  });

  it('refuses such an endpoint in the global config too', () => {
    expect(() => parseConfig({ sink: { type: 'http', endpoint: 'https://logs/x?token=abc' } })).toThrow(/sink.endpoint: query parameter "token"/);
  });
});

describe('values bound for headers and routing are checked at admission', () => {
  it.each([
    ['jobharvest.io/loki-tenant', '团队', 'loki'],
    ['jobharvest.io/loki-tenant', 'team a', 'loki'],
    ['jobharvest.io/es-index', 'Logs Index', 'elasticsearch'],
    ['jobharvest.io/es-index', 'logs/../x', 'elasticsearch'],
    ['jobharvest.io/forward-tag', 'kube.团队', 'forward'],
    ['jobharvest.io/forward-tag', 'kube.${secret}', 'forward'],
  ])('%s=%s falls back with a warning', (annotation, value, sink) => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/sink': sink, [annotation]: value };
    const r = run(j);
    expect(r.decision.action).toBe('inject');
    expect(r.warnings.join('\n')).toContain(`annotation ${annotation}=`);
    const env = (r.job.spec!.template!.spec!.initContainers![0] as any).env as Array<{ name: string; value?: string }>;
    expect(env.some((e) => e.value === value)).toBe(false);
  });

  it('keeps valid ones', () => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/sink': 'loki', 'jobharvest.io/loki-tenant': 'team-a_1' };
    const r = run(j);
    expect(r.decision.action === 'inject' && r.decision.settings.lokiTenant).toBe('team-a_1');
    expect(r.warnings).toEqual([]);
  });

  it.each([
    ['sink.headers', { headers: 'X-Team=团队' }],
    ['sink.headers', { headers: 'Bad Name=x' }],
    ['sink.lokiTenant', { lokiTenant: '团队' }],
    ['sink.esIndex', { esIndex: 'UPPER' }],
    ['sink.forwardTag', { forwardTag: 'a b' }],
  ])('refuses a bad %s in the global config', (path, sink) => {
    expect(() => parseConfig({ sink: { type: 'http', endpoint: 'http://logs:1', ...sink } })).toThrow(new RegExp(path.replace('.', '\\.')));
  });
});

describe('the API server annotation size limit', () => {
  const LIMIT = 256 * 1024;
  const fill = (bytes: number) => ({ big: 'x'.repeat(bytes - 'big'.length) });

  it('skips a Job whose annotations would go over the limit once ours are added', () => {
    const j = job();
    j.metadata.annotations = fill(LIMIT - 100);
    const r = run(j);
    expect(reasonOf(r)).toBe('annotations-too-large');
    expect(r.job).toBe(j);
    expect(r.warnings.join()).toMatch(/annotations .* over the API server's limit of 262144/);
  });

  it('checks the pod template annotations too', () => {
    const j = job();
    j.spec.template.metadata = { annotations: fill(LIMIT - 10) };
    expect(reasonOf(run(j))).toBe('annotations-too-large');
  });

  it('injects when there is room', () => {
    const j = job();
    j.metadata.annotations = fill(LIMIT - 2000);
    expect(reasonOf(run(j))).toBe('inject');
  });
});

describe('spec.managedBy', () => {
  it('skips a Job another controller runs (MultiKueue), with a warning', () => {
    const j = job();
    j.spec.managedBy = 'kueue.x-k8s.io/multikueue';
    const r = run(j);
    expect(reasonOf(r)).toBe('managed-elsewhere');
    expect(r.job.spec?.ttlSecondsAfterFinished).toBeUndefined();
    expect(r.warnings.join()).toMatch(/kueue.x-k8s.io\/multikueue/);
  });
  it('injects when the built-in Job controller manages it', () => {
    const j = job();
    j.spec.managedBy = 'kubernetes.io/job-controller';
    expect(reasonOf(run(j))).toBe('inject');
  });
});

describe('CLI input', () => {
  it('a YAML alias bomb is bad input (exit 2, JH_BAD_INPUT)', () => {
    const levels = ['a: &a ["x","x","x","x","x","x","x","x","x"]'];
    for (const [i, n] of ['b', 'c', 'd', 'e', 'f', 'g'].entries()) {
      const prev = 'abcdefg'[i]!;
      levels.push(`${n}: &${n} [${Array(9).fill(`*${prev}`).join(',')}]`);
    }
    const r = spawnSync(join(ROOT, 'node_modules/.bin/tsx'), [join(ROOT, 'src/cli/main.ts'), 'inject', '-f', '-'], { input: levels.join('\n') + '\n', encoding: 'utf8', cwd: ROOT });
    expect(r.stderr).toMatch(/JH_BAD_INPUT/);
    expect(r.status).toBe(2);
  });
});

describe('node mode on a real node', () => {
  const sidecarOf = (j: Record<string, any>) => j.spec.template.spec.initContainers[0];
  it('runs the sidecar non-root in group 0, which may read containerd\'s root:root 0640 log files', () => {
    const sc = sidecarOf(run(job()).job).securityContext;
    expect(sc).toMatchObject({ runAsNonRoot: true, runAsUser: 65532, runAsGroup: 0, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });
  });
  it('keeps its own group in api mode, which reads no host files', () => {
    const ns = optedIn('team-a');
    ns.annotations = { ...ns.annotations, 'jobharvest.io/mode': 'api' };
    expect(sidecarOf(run(job(), durableConfig(), ns).job).securityContext.runAsGroup).toBe(65532);
  });
  it('gives a user-namespaced pod (hostUsers: false) api mode, with a warning, never a hostPath, where the namespace reads in api mode', () => {
    const j = job();
    j.spec.template.spec.hostUsers = false;
    const r = run(j, durableConfig(), optedIn('team-a', { annotations: { 'jobharvest.io/mode': 'api' } }));
    expect(r.decision.action === 'inject' && r.decision.mode).toBe('api');
    expect(JSON.stringify(r.job.spec!.template!.spec!.volumes)).not.toContain('hostPath');
    const offline = mutateJob(j, { config: durableConfig(), namespace: undefined, assumeOptedIn: true });
    expect(offline.decision.action === 'inject' && offline.decision.mode).toBe('api');
    expect(offline.warnings.join()).toMatch(/hostUsers: false.*api mode/);
  });
  it('admits a user-namespaced pod without the sidecar, never with a hostPath, where the namespace reads in node mode: api mode there would need a binding nothing makes', () => {
    const j = job();
    j.spec.template.spec.hostUsers = false;
    const r = run(j);
    expect(reasonOf(r)).toBe('needs-api-mode');
    expect(hasSidecar(r.job)).toBe(false);
    expect(JSON.stringify(r.job.spec!.template!.spec!.volumes ?? [])).not.toContain('hostPath');
    expect(r.warnings.join()).toMatch(/hostUsers: false.*node mode.*annotate the namespace jobharvest.io\/mode: api/);
  });
  it('refuses a Job-level mode api where the namespace reads in node mode: node mode, with a warning', () => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/mode': 'api' };
    const r = run(j);
    expect(r.decision.action === 'inject' && r.decision.mode).toBe('node');
    expect(r.warnings.join()).toMatch(/mode: api ignored/);
    j.spec.template.metadata = { annotations: { 'jobharvest.io/mode': 'api' } };
    delete j.metadata.annotations;
    expect(run(j).decision).toMatchObject({ action: 'inject', mode: 'node' });
    // A namespace the operator put in api mode (by annotation, or by its Pod Security level) keeps it.
    expect(run(j, durableConfig(), optedIn('team-a', { labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } })).decision).toMatchObject({ mode: 'api' });
    // The offline CLI knows no namespace and makes no binding: the Job's word stands.
    expect(mutateJob(j, { config: durableConfig(), namespace: undefined, assumeOptedIn: true }).decision).toMatchObject({ mode: 'api' });
  });
});

describe('a kubelet whose podLogsDir is not /var/log/pods', () => {
  it('mounts the configured host path in node mode', () => {
    const config = parseConfig({ ...durableConfig(), sidecar: { ...durableConfig().sidecar, podLogsHostPath: '/data/kubelet/pod-logs' } });
    const volumes = run(job(), config).job.spec!.template!.spec!.volumes as Array<Record<string, any>>;
    expect(volumes.find((v) => v.hostPath)?.hostPath).toEqual({ path: '/data/kubelet/pod-logs', type: 'Directory' });
    const defaults = run(job()).job.spec!.template!.spec!.volumes as Array<Record<string, any>>;
    expect(defaults.find((v) => v.hostPath)?.hostPath.path).toBe('/var/log/pods');
  });
  it('refuses a relative path in the configuration', () => {
    expect(() => parseConfig({ sidecar: { podLogsHostPath: 'var/log/pods' } })).toThrow(/absolute path/);
  });
});
