/**
 * The oldest supported Kubernetes release: one value (src/contract/kubernetes.ts)
 * that the webhook reports against, the chart refuses to install below and the
 * README names; and a release below it never changes what the webhook admits.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { MIN_KUBERNETES } from '../../src/contract/kubernetes.ts';
import { decide } from '../../src/core/decide.ts';
import { parseConfig } from '../../src/core/config.ts';
import { isSupportedKubernetes, kubernetesSupportMessage } from '../../src/core/server-version.ts';
import { createMetrics, kubernetesVersionLabel } from '../../src/http/metrics.ts';
import { REPO_ROOT } from '../harness/chart/dockerfile.ts';
import { job, optedIn } from '../support/fixtures.ts';

const read = (path: string) => readFileSync(join(REPO_ROOT, path), 'utf8');
const oldest = `${MIN_KUBERNETES.major}.${MIN_KUBERNETES.minor}`;

describe('isSupportedKubernetes', () => {
  it('is true from the oldest supported minor on, across majors, and false below it', () => {
    const at = (major: number, minor: number) => isSupportedKubernetes({ major, minor }, { major: 1, minor: 32 });
    expect([at(1, 29), at(1, 31), at(1, 32), at(1, 33), at(1, 37), at(2, 0), at(0, 99)]).toEqual([false, false, true, true, true, true, false]);
  });

  it('defaults to MIN_KUBERNETES', () => {
    expect(isSupportedKubernetes(MIN_KUBERNETES)).toBe(true);
    expect(isSupportedKubernetes({ major: MIN_KUBERNETES.major, minor: MIN_KUBERNETES.minor - 1 })).toBe(false);
  });
});

describe('kubernetesSupportMessage', () => {
  const min = { major: 1, minor: 32 };
  it('says a supported release is supported', () => {
    expect(kubernetesSupportMessage('v1.34.4-eks-1a2b', { major: 1, minor: 34 }, min)).toBe('Kubernetes v1.34.4-eks-1a2b is supported (1.32 or newer)');
  });
  it('says an older release with native sidecars is still injected, untested, and to upgrade', () => {
    expect(kubernetesSupportMessage('v1.30.9', { major: 1, minor: 30 }, min)).toBe(
      'Kubernetes v1.30.9 is older than 1.32, the oldest supported release: Jobs are still admitted and injected, but this release is not tested; upgrade the cluster',
    );
  });
  it('says a release without native sidecars gets no sidecar', () => {
    expect(kubernetesSupportMessage('v1.28.15', { major: 1, minor: 28 }, min)).toBe(
      'Kubernetes v1.28.15 is older than 1.32, the oldest supported release: Jobs are admitted without the log sidecar; upgrade the cluster',
    );
  });
});

describe('an unsupported release and admission', () => {
  it('still injects on a release below the minimum that has native sidecars: support is reported, never enforced', () => {
    const below = { major: 1, minor: MIN_KUBERNETES.minor - 1 };
    expect(isSupportedKubernetes(below)).toBe(false);
    const d = decide(job(), { config: parseConfig({}), namespace: optedIn('team-a'), serverVersion: below });
    expect(d.action).toBe('inject');
  });
});

describe('jobharvest_webhook_kubernetes_supported', () => {
  it('carries the release as its version label, 1 or 0', async () => {
    const metrics = createMetrics();
    metrics.kubernetesSupported.set({ version: kubernetesVersionLabel('v1.31.4') }, 0);
    const text = await metrics.registry.metrics();
    expect(text).toContain('# TYPE jobharvest_webhook_kubernetes_supported gauge');
    expect(text).toContain('jobharvest_webhook_kubernetes_supported{version="v1.31.4"} 0');
  });
  it('caps an overlong build string', () => {
    expect(kubernetesVersionLabel(`v1.33.0-${'x'.repeat(200)}`)).toHaveLength(64);
  });
});

describe('the minimum, everywhere it is written', () => {
  it("is the chart's kubeVersion constraint", () => {
    const chart = parse(read('charts/jobharvest/Chart.yaml')) as { kubeVersion: string };
    expect(chart.kubeVersion).toBe(`>=${oldest}.0-0`);
  });
  it('is the README requirement and the metric is documented in operations.md', () => {
    expect(read('README.md')).toContain(`Needs Kubernetes ${oldest} or newer`);
    expect(read('docs/operations.md')).toContain('`jobharvest_webhook_kubernetes_supported`');
  });
});
