import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { REPO } from '../harness/kubelet/images.ts';
import { buildImages, type BuiltImages } from '../harness/node/images.ts';
import { NODE_BIN } from '../harness/node/node.ts';
import { describeRealNode } from './support.ts';

/** A file of an image archive (a tar), as text. */
function member(archive: string, path: string): string {
  return execFileSync('tar', ['-xOf', archive, path], { maxBuffer: 1 << 28 }).toString();
}

function blob(archive: string, digest: string): string {
  return `blobs/sha256/${digest.slice('sha256:'.length)}`;
}

interface Manifest {
  config: { digest: string };
  layers: Array<{ digest: string }>;
}

function layerEntries(archive: string, digest: string): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'jobharvest-layer-'));
  try {
    execFileSync('tar', ['-xf', archive, '-C', dir, blob(archive, digest)]);
    return execFileSync('tar', ['-tf', join(dir, blob(archive, digest))], { maxBuffer: 1 << 26 })
      .toString()
      .split('\n')
      .filter((l) => l !== '');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function dockerfileLine(keyword: string): string {
  // Read straight from the text, not through images.ts's reader, so that a
  // misreading there cannot agree with itself.
  const lines = readFileSync(join(REPO, 'Dockerfile'), 'utf8').split('\n').filter((l) => l.startsWith(`${keyword} `));
  return lines.at(-1)!.slice(keyword.length + 1).trim();
}

describeRealNode('the images built without Docker', () => {
  let dir: string;
  let images: BuiltImages;
  let again: BuiltImages;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'jobharvest-images-'));
    const debCache = join(process.env.JOBHARVEST_CACHE ?? join(process.env.HOME ?? '/root', '.cache/jobharvest'), 'node-debs');
    images = await buildImages({ dir: join(dir, 'a'), pauseBinary: join(NODE_BIN, 'pause'), debCache });
    again = await buildImages({ dir: join(dir, 'b'), pauseBinary: join(NODE_BIN, 'pause'), debCache });
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the jobharvest image has the Dockerfile runtime stage config, under the name the chart and the webhook default to', () => {
    const archive = images.jobharvest.archive;
    const index = JSON.parse(member(archive, 'index.json')) as { manifests: Array<{ digest: string; annotations: Record<string, string> }> };
    const chart = readFileSync(join(REPO, 'charts/jobharvest/Chart.yaml'), 'utf8');
    const values = readFileSync(join(REPO, 'charts/jobharvest/values.yaml'), 'utf8');
    const appVersion = /^appVersion:\s*"?([^"\n]+)"?/m.exec(chart)![1];
    const repository = /^image:\n(?:\s+#.*\n)*\s+repository:\s*(\S+)/m.exec(values)![1];
    expect(index.manifests.map((m) => m.annotations['io.containerd.image.name'])).toEqual([`docker.io/library/${repository}:${appVersion}`]);

    const manifest = JSON.parse(member(archive, blob(archive, index.manifests[0]!.digest))) as Manifest;
    const config = JSON.parse(member(archive, blob(archive, manifest.config.digest))) as {
      os: string;
      architecture: string;
      config: Record<string, unknown>;
      rootfs: { diff_ids: string[] };
    };
    expect({
      os: config.os,
      architecture: config.architecture,
      User: config.config.User,
      Entrypoint: config.config.Entrypoint,
      Cmd: config.config.Cmd,
      WorkingDir: config.config.WorkingDir,
      ExposedPorts: config.config.ExposedPorts,
    }).toEqual({
      os: 'linux',
      architecture: process.arch === 'x64' ? 'amd64' : process.arch,
      User: dockerfileLine('USER'),
      Entrypoint: JSON.parse(dockerfileLine('ENTRYPOINT')),
      Cmd: JSON.parse(dockerfileLine('CMD')),
      WorkingDir: dockerfileLine('WORKDIR'),
      ExposedPorts: { [`${dockerfileLine('EXPOSE')}/tcp`]: {} },
    });
    expect(config.rootfs.diff_ids).toEqual(manifest.layers.map((l) => l.digest));
  });

  it('the jobharvest image holds dist/ without source maps in /app, the pinned node in /nodejs/bin, and a Debian base with nonroot 65532', () => {
    const archive = images.jobharvest.archive;
    const index = JSON.parse(member(archive, 'index.json')) as { manifests: Array<{ digest: string }> };
    const manifest = JSON.parse(member(archive, blob(archive, index.manifests[0]!.digest))) as Manifest;
    const [base, node, app] = manifest.layers.map((l) => layerEntries(archive, l.digest)) as [string[], string[], string[]];

    const distFiles = (readdirSync(join(REPO, 'dist'), { recursive: true, withFileTypes: true }) as Array<{ isFile(): boolean; parentPath: string; name: string }>)
      .filter((e) => e.isFile() && !e.name.endsWith('.map'))
      .map((e) => `./app/${relative(join(REPO, 'dist'), join(e.parentPath, e.name))}`)
      .sort();
    expect(app.filter((e) => !e.endsWith('/')).sort()).toEqual(distFiles);
    expect(distFiles).toContain('./app/jobharvest.mjs');
    expect(distFiles).toContain('./app/sidecar.mjs');

    expect(node.filter((e) => !e.endsWith('/'))).toEqual(['./nodejs/bin/node']);
    const layerDir = mkdtempSync(join(tmpdir(), 'jobharvest-layer-'));
    try {
      const nodeLayer = blob(archive, manifest.layers[1]!.digest);
      execFileSync('tar', ['-xf', archive, '-C', layerDir, nodeLayer]);
      const inImage = execFileSync('tar', ['-xOf', join(layerDir, nodeLayer), './nodejs/bin/node'], { maxBuffer: 1 << 28 });
      const pinned = readFileSync(join(REPO, 'node_modules/node/bin/node'));
      expect(createHash('sha256').update(inImage).digest('hex')).toBe(createHash('sha256').update(pinned).digest('hex'));
    } finally {
      rmSync(layerDir, { recursive: true, force: true });
    }

    for (const path of ['./etc/passwd', './etc/group', './etc/ssl/certs/ca-certificates.crt', './tmp/', './home/nonroot/']) expect(base).toContain(path);
    expect(base.some((e) => /\/libstdc\+\+\.so\.6$/.test(e))).toBe(true);
    expect(base.some((e) => /\/ld-linux-x86-64\.so\.2$/.test(e) || /\/ld-linux-aarch64\.so\.1$/.test(e))).toBe(true);
    expect(base.some((e) => e.startsWith('./usr/share/doc/'))).toBe(false);
  });

  it('builds byte-identical archives from the same inputs', () => {
    expect([again.pause.manifest.digest, again.busybox.manifest.digest, again.jobharvest.manifest.digest]).toEqual([
      images.pause.manifest.digest,
      images.busybox.manifest.digest,
      images.jobharvest.manifest.digest,
    ]);
  });
});
