/**
 * One version: package.json's. The chart's `version` and `appVersion` (and so
 * the image tag the chart runs, image.tag defaulting to appVersion), the
 * Dockerfile's OCI version label, the webhook's default sidecar image and the
 * README's image, chart package and `helm install --version` all follow it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { readDockerfile, REPO_ROOT } from '../harness/chart/dockerfile.ts';

const read = (path: string) => readFileSync(join(REPO_ROOT, path), 'utf8');
const version = (JSON.parse(read('package.json')) as { version: string }).version;

describe('the version, from package.json', () => {
  it('is the chart version and appVersion, and the chart leaves the image tag to appVersion', () => {
    const chart = parse(read('charts/jobharvest/Chart.yaml')) as { version: string; appVersion: string };
    expect({ version: chart.version, appVersion: chart.appVersion }).toEqual({ version, appVersion: version });
    const values = parse(read('charts/jobharvest/values.yaml')) as { image: { tag: string } };
    expect(values.image.tag).toBe('');
  });

  it('is the Dockerfile label version and the default sidecar image tag', () => {
    const runtime = readDockerfile().at(-1)!;
    const arg = runtime.instructions.find((i) => i.keyword === 'ARG' && i.args.startsWith('VERSION='));
    expect(arg?.args).toBe(`VERSION=${version}`);
    expect(read('src/core/config.ts')).toContain(`default('jobharvest:${version}')`);
  });

  it('is what the README and the operations guide build, push and install', () => {
    for (const doc of ['README.md', 'docs/operations.md']) {
      const text = read(doc);
      const tags = [...text.matchAll(/registry\.example\.com\/jobharvest:([^\s`]+)/g)].map((m) => m[1]);
      const packages = [...text.matchAll(/jobharvest-(\d[^\s`]*)\.tgz/g)].map((m) => m[1]);
      const installs = [...text.matchAll(/oci:\/\/\S+\/jobharvest --version (\S+)/g)].map((m) => m[1]);
      expect(tags.length, `${doc} names the image`).toBeGreaterThan(0);
      expect(packages.length + installs.length, `${doc} packages or installs the chart`).toBeGreaterThan(0);
      expect(new Set([...tags, ...packages, ...installs]), doc).toEqual(new Set([version]));
    }
    expect(read('README.md')).toContain(`docker build -t registry.example.com/jobharvest:${version} .`);
  });
});
