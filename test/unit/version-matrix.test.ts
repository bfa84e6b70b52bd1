/**
 * The version matrix's modules (test/harness/versions/<minor>/go.mod): each
 * pins one release of its minor with every staging module of that minor, the
 * minors run without a gap up to the default pins, and the oldest is the
 * minimum the chart and the webhook state.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MIN_KUBERNETES } from '../../src/contract/kubernetes.ts';
import { REPO_ROOT } from '../harness/chart/dockerfile.ts';

const DIR = join(REPO_ROOT, 'test/harness/versions');
const minors = readdirSync(DIR)
  .filter((d) => /^1\.\d+$/.test(d))
  .sort((a, b) => Number(a.slice(2)) - Number(b.slice(2)));
const goMod = (path: string) => readFileSync(join(REPO_ROOT, path), 'utf8');
const required = (mod: string, path: string) => new RegExp(`^\\s*${path.replace(/[./]/g, '\\$&')}\\s+(v\\S+)`, 'm').exec(mod)?.[1];
const defaultMinor = Number(/^v1\.(\d+)\./.exec(required(goMod('test/harness/cluster/go.mod'), 'k8s.io/kubernetes') ?? '')?.[1]);

describe('the version matrix modules', () => {
  it('run from the minimum without a gap up to the default pins', () => {
    expect(minors.map((m) => Number(m.slice(2)))).toEqual(Array.from({ length: defaultMinor - MIN_KUBERNETES.minor }, (_, i) => MIN_KUBERNETES.minor + i));
  });

  it.each(minors)('%s pins one release of its minor, etcd, and every staging module at that minor', (minor) => {
    const mod = goMod(`test/harness/versions/${minor}/go.mod`);
    expect(mod).toContain(`module jobharvest/test/versions/${minor}\n`);
    expect(required(mod, 'k8s.io/kubernetes')).toMatch(new RegExp(`^v${minor.replace('.', '\\.')}\\.\\d+$`));
    expect(required(mod, 'go.etcd.io/etcd/server/v3')).toMatch(/^v3\.\d+\.\d+$/);
    const replaces = [...mod.matchAll(/^\s*(k8s\.io\/[\w.-]+) => (k8s\.io\/[\w.-]+) (v\S+)$/gm)];
    expect(replaces.length).toBeGreaterThanOrEqual(31);
    for (const [, from, to, version] of replaces) {
      expect(to).toBe(from);
      expect(version, from).toMatch(new RegExp(`^v0\\.${minor.slice(2)}\\.\\d+$`));
    }
    for (const tool of ['kube-apiserver', 'kube-controller-manager', 'kubelet', 'kube-proxy', 'kube-scheduler']) expect(mod).toContain(`\tk8s.io/kubernetes/cmd/${tool}\n`);
  });
});
