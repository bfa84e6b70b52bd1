import { describe, expect, it } from 'vitest';
import { decide } from '../../src/core/decide.ts';
import { parseConfig } from '../../src/core/config.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { parseServerVersion } from '../../src/core/server-version.ts';
import { review } from '../../src/core/admission.ts';
import { deps, durableConfig, job, optedIn, review as reviewOf } from '../support/fixtures.ts';
import { SUBPATH_EXPR } from '../../src/contract/env.ts';

const cfg = (over: Record<string, unknown> = {}) => parseConfig(over);

describe('decide', () => {
  it('picks node or api from the namespace pod-security level in auto mode', () => {
    const modeFor = (level?: string) => {
      const d = decide(job(), { config: cfg(), namespace: optedIn('team-a', level ? { labels: { 'pod-security.kubernetes.io/enforce': level } } : {}) });
      return d.action === 'inject' ? d.mode : d.reason;
    };
    expect(modeFor()).toBe('node');
    expect(modeFor('privileged')).toBe('node');
    expect(modeFor('baseline')).toBe('api');
    expect(modeFor('restricted')).toBe('api');
  });

  it('applies precedence: global < namespace < Job < pod template', () => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/ttl-seconds-after-finished': '300', 'jobharvest.io/sink': 'http' };
    j.spec.template.metadata = { annotations: { 'jobharvest.io/ttl-seconds-after-finished': '400' } };
    const ns = optedIn('team-a', { annotations: { 'jobharvest.io/ttl-seconds-after-finished': '200', 'jobharvest.io/endpoint': 'http://ns:1', 'jobharvest.io/sink': 'loki' } });
    const d = decide(j, { config: cfg({ ttlSecondsAfterFinished: 100 }), namespace: ns });
    expect(d.action).toBe('inject');
    if (d.action !== 'inject') return;
    expect(d.settings.ttlSecondsAfterFinished).toBe(400);
    expect(d.settings.sink).toBe('http');
    expect(d.settings.endpoint).toBe('http://ns:1');
  });

  it('an invalid value falls back to the level below, with a warning', () => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/ttl-seconds-after-finished': 'soon' };
    const ns = optedIn('team-a', { annotations: { 'jobharvest.io/ttl-seconds-after-finished': '200' } });
    const d = decide(j, { config: durableConfig(), namespace: ns });
    expect(d.action === 'inject' && d.settings.ttlSecondsAfterFinished).toBe(200);
    expect(d.warnings).toEqual(['Job annotation jobharvest.io/ttl-seconds-after-finished="soon" ignored: not a non-negative integer; using 200']);
  });

  it('caps the TTL at the configured maximum but leaves a Job\'s own TTL alone', () => {
    const config = durableConfig({ maxTtlSecondsAfterFinished: 600 });
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/ttl-seconds-after-finished': '86400' };
    const r = mutateJob(j, { config, namespace: optedIn('team-a') });
    expect(r.job.spec?.ttlSecondsAfterFinished).toBe(600);
    expect(r.warnings.join()).toMatch(/capped to the configured maximum 600/);
    const own = job();
    own.spec.ttlSecondsAfterFinished = 90000;
    expect(mutateJob(own, { config, namespace: optedIn('team-a') }).job.spec?.ttlSecondsAfterFinished).toBe(90000);
  });

  it('supports label-based namespace selection', () => {
    const config = cfg({ namespaceSelection: 'label' });
    expect(decide(job(), { config, namespace: optedIn('team-a') }).action).toBe('skip');
    expect(decide(job(), { config, namespace: { name: 'team-a', labels: { 'jobharvest.io/inject': 'enabled' } } }).action).toBe('inject');
  });

  it('skips with a warning when the namespace cannot be read', () => {
    const d = decide(job(), { config: cfg(), namespace: undefined });
    expect(d).toMatchObject({ action: 'skip', reason: 'namespace-unknown' });
    expect(d.warnings[0]).toMatch(/could not be read/);
  });

  it('skips a sink without an endpoint rather than inject a sidecar that cannot ship', () => {
    const d = decide(job(), { config: cfg({ sink: { type: 'loki' } }), namespace: optedIn('team-a') });
    expect(d).toMatchObject({ action: 'skip', reason: 'sink-unconfigured' });
  });

  it('never puts credentials inline: only secretKeyRef', () => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/auth-secret': 'creds', 'jobharvest.io/sink': 'http', 'jobharvest.io/endpoint': 'https://x' };
    const r = mutateJob(j, { config: cfg(), namespace: optedIn('team-a') });
    const env = (r.job.spec?.template?.spec?.initContainers?.[0]?.env ?? []) as Array<{ name: string; value?: string; valueFrom?: any }>;
    const secretEnv = env.filter((e) => /AUTH|PASSWORD|TOKEN|SHARED_KEY/.test(e.name));
    expect(secretEnv.length).toBe(3);
    for (const e of secretEnv) {
      expect(e.value).toBeUndefined();
      expect(e.valueFrom.secretKeyRef.name).toBe('creds');
    }
  });

  it('rejects credentials embedded in an endpoint URL', () => {
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/endpoint': 'https://user:pw@logs.example.com', 'jobharvest.io/sink': 'http' };
    const d = decide(j, { config: cfg(), namespace: optedIn('team-a') });
    expect(d.action).toBe('skip');
    expect(d.warnings.join()).toMatch(/credentials in the URL are not allowed/);
    expect(d.warnings.join()).not.toMatch(/pw@/);
  });
});

describe('parseServerVersion', () => {
  it('reads managed-cluster minors like 29+', () => {
    expect(parseServerVersion({ major: '1', minor: '29+' })).toEqual({ major: 1, minor: 29 });
    expect(parseServerVersion({ gitVersion: 'v1.34.2' })).toEqual({ major: 1, minor: 34 });
    expect(parseServerVersion({})).toBeUndefined();
  });
});

describe('sink settings from the global configuration', () => {
  it('passes extra headers and compression off (the older gzip switch) to the sidecar as plain env', () => {
    const config = parseConfig({ sink: { type: 'http', endpoint: 'https://logs', headers: 'X-Team=a', gzip: false } });
    const env = (mutateJob(job(), { config, namespace: optedIn('team-a') }).job.spec?.template?.spec?.initContainers?.[0]?.env ?? []) as Array<{ name: string; value?: string }>;
    expect(env).toContainEqual({ name: 'JOBHARVEST_HEADERS', value: 'X-Team=a' });
    expect(env).toContainEqual({ name: 'JOBHARVEST_COMPRESSION', value: 'none' });
    const defaults = (mutateJob(job(), { config: parseConfig({}), namespace: optedIn('team-a') }).job.spec?.template?.spec?.initContainers?.[0]?.env ?? []) as Array<{ name: string }>;
    expect(defaults.map((e) => e.name)).not.toContain('JOBHARVEST_GZIP');
    expect(defaults.map((e) => e.name)).not.toContain('JOBHARVEST_COMPRESSION');
  });
});

describe('the codec the sidecar gets', () => {
  const codecEnv = (sink: Record<string, unknown>) => {
    const config = parseConfig({ sink: { endpoint: 'https://logs', ...sink } });
    const env = (mutateJob(job(), { config, namespace: optedIn('team-a') }).job.spec?.template?.spec?.initContainers?.[0]?.env ?? []) as Array<{ name: string; value?: string }>;
    return env.filter((e) => e.name === 'JOBHARVEST_COMPRESSION' || e.name === 'JOBHARVEST_GZIP');
  };
  it('zstd where the sink takes it; nothing rendered where the sink would choose gzip or nothing by itself', () => {
    expect(codecEnv({ type: 'otlp', compression: 'zstd' })).toEqual([{ name: 'JOBHARVEST_COMPRESSION', value: 'zstd' }]);
    expect(codecEnv({ type: 'http', compression: 'zstd' })).toEqual([{ name: 'JOBHARVEST_COMPRESSION', value: 'zstd' }]);
    expect(codecEnv({ type: 'loki', compression: 'zstd' })).toEqual([]);
    expect(codecEnv({ type: 'otlp', compression: 'gzip' })).toEqual([]);
    expect(codecEnv({ type: 'syslog', endpoint: 'tcp://syslog:514', compression: 'zstd' })).toEqual([]);
    expect(codecEnv({ type: 'loki', compression: 'none' })).toEqual([{ name: 'JOBHARVEST_COMPRESSION', value: 'none' }]);
  });
});

describe("node mode: the sidecar sees its own pod's log directory and nothing else", () => {
  it("mounts the node's pod logs read-only, at subPathExpr namespace_pod_uid from the downward API, in the sidecar alone", () => {
    const r = mutateJob(job('reader'), { config: durableConfig(), namespace: optedIn('team-a', { annotations: { 'jobharvest.io/mode': 'node' } }) });
    expect(r.decision.action).toBe('inject');
    type Mount = { name: string; readOnly?: boolean; subPath?: string; subPathExpr?: string };
    type C = { volumeMounts?: Mount[]; env?: Array<{ name: string; valueFrom?: { fieldRef?: { fieldPath?: string } } }> };
    const spec = r.job.spec!.template!.spec! as unknown as { containers: C[]; initContainers: C[] };
    const sidecar = spec.initContainers[0]!;
    const logs = sidecar.volumeMounts?.find((m) => m.name === 'jobharvest-pod-logs');
    expect(logs).toMatchObject({ readOnly: true, subPathExpr: SUBPATH_EXPR });
    expect(logs?.subPath).toBeUndefined();
    const env = new Map((sidecar.env ?? []).map((e) => [e.name, e.valueFrom?.fieldRef?.fieldPath]));
    expect([env.get('POD_NAMESPACE'), env.get('POD_NAME'), env.get('POD_UID')]).toEqual(['metadata.namespace', 'metadata.name', 'metadata.uid']);
    const others = [...spec.containers, ...spec.initContainers.slice(1)];
    expect(others.flatMap((c) => (c.volumeMounts ?? []).map((m) => m.name)).filter((n) => n.startsWith('jobharvest-'))).toEqual([]);
  });
});

describe("a container that mounts jobharvest's volumes is a name conflict", () => {
  // The webhook adds these volumes; a tenant's mount of one would resolve once
  // it is added: every pod's logs on the node (without the sidecar's
  // subPathExpr), the sidecar's token, its checkpoints, its TLS files.
  const VOLUMES = ['jobharvest-pod-logs', 'jobharvest-token', 'jobharvest-state', 'jobharvest-tls'];
  for (const mode of ['node', 'api'] as const) {
    for (const volume of VOLUMES) {
      for (const where of ['containers', 'initContainers'] as const) {
        it(`${mode} mode: ${volume} mounted by one of the ${where}: skipped with a warning, admitted (never refused)`, async () => {
          const j = job('peek');
          j.metadata.annotations = { 'jobharvest.io/tls-secret': 'sink-tls' };
          // The mode is the namespace's: a Job cannot move a node-mode namespace to api mode.
          const ns = optedIn('team-a', { annotations: { 'jobharvest.io/mode': mode } });
          // The token volume is added when the pod turned its own token off (api mode).
          j.spec.template.spec.automountServiceAccountToken = false;
          const mount = { name: volume, mountPath: '/peek', readOnly: true };
          if (where === 'containers') j.spec.template.spec.containers[0].volumeMounts = [mount];
          else j.spec.template.spec.initContainers = [{ name: 'setup', image: 'busybox', volumeMounts: [mount] }];
          // Without the mount, each of these volumes is one the webhook adds.
          const clean = structuredClone(j);
          if (where === 'containers') delete clean.spec.template.spec.containers[0].volumeMounts;
          else delete clean.spec.template.spec.initContainers[0].volumeMounts;
          const added = mutateJob(clean, { config: durableConfig(), namespace: ns });
          const names = (added.job.spec?.template?.spec?.volumes ?? []).map((v) => v.name);
          // The pod logs are node mode's, the token api mode's; a conflict in either mode all the same.
          const modes: Record<string, string[]> = { 'jobharvest-pod-logs': ['node'], 'jobharvest-token': ['api'] };
          if ((modes[volume] ?? [mode]).includes(mode)) expect(names).toContain(volume);
          else expect(names).not.toContain(volume);
          const who = where === 'containers' ? 'container "main"' : 'init container "setup"';
          const r = mutateJob(j, { config: durableConfig(), namespace: ns });
          expect(r.decision).toMatchObject({ action: 'skip', reason: 'name-conflict' });
          expect(r.warnings).toContain(`${who} mounts the volume "${volume}", which is jobharvest's; Job admitted without the log sidecar`);
          expect(r.job).toBe(j);
          const ans = await review(reviewOf(j).request as never, deps({ namespace: () => ns }));
          expect(ans.review.response).toMatchObject({ allowed: true, warnings: [`jobharvest: ${who} mounts the volume "${volume}", which is jobharvest's; Job admitted without the log sidecar`] });
          expect(ans.review.response.patch).toBeUndefined();
        });
      }
    }
  }

  it("a mount of any jobharvest-* name counts, and the tenant's own volumes and mounts are not a conflict", () => {
    const j = job('own');
    j.spec.template.spec.containers[0].volumeMounts = [{ name: 'jobharvest-cache', mountPath: '/c' }];
    expect(decide(j, { config: durableConfig(), namespace: optedIn('team-a') })).toMatchObject({ action: 'skip', reason: 'name-conflict' });
    const ok = job('ok');
    ok.spec.template.spec.volumes = [{ name: 'scratch', emptyDir: {} }];
    ok.spec.template.spec.containers[0].volumeMounts = [{ name: 'scratch', mountPath: '/var/lib/jobharvest' }];
    expect(decide(ok, { config: durableConfig(), namespace: optedIn('team-a') }).action).toBe('inject');
  });
});
