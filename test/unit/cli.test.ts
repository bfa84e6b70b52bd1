import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments } from 'yaml';

const ROOT = new URL('../../', import.meta.url).pathname;
const TSX = join(ROOT, 'node_modules/.bin/tsx');

function cli(args: string[], input?: string) {
  const r = spawnSync(TSX, [join(ROOT, 'src/cli/main.ts'), ...args], { input, encoding: 'utf8', cwd: ROOT });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('jobharvest CLI (real process)', () => {
  it('inject reads a file and prints the injected Job', () => {
    const r = cli(['inject', '-f', 'examples/job.yaml', '--sink', 'http', '--endpoint', 'http://logs.example:8080/ingest']);
    expect(r.code).toBe(0);
    const out = parseYaml(r.stdout);
    expect(out.spec.template.spec.initContainers[0].name).toBe('jobharvest');
    expect(out.spec.ttlSecondsAfterFinished).toBe(3600);
  });

  it('inject reads stdin with -f -, honours flags, and is idempotent', () => {
    const input = `apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\nspec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}}\n`;
    const first = cli(['inject', '-f', '-', '--mode', 'api', '--sink', 'loki', '--endpoint', 'http://loki:3100', '--ttl', '90'], input);
    expect(first.code).toBe(0);
    const job = parseYaml(first.stdout);
    expect(job.spec.ttlSecondsAfterFinished).toBe(90);
    const env = Object.fromEntries(job.spec.template.spec.initContainers[0].env.filter((e: any) => 'value' in e).map((e: any) => [e.name, e.value]));
    expect(env).toMatchObject({ JOBHARVEST_MODE: 'api', JOBHARVEST_SINK: 'loki', JOBHARVEST_ENDPOINT: 'http://loki:3100' });
    const second = cli(['inject', '-f', '-', '--mode', 'api', '--sink', 'loki', '--endpoint', 'http://loki:3100', '--ttl', '90'], first.stdout);
    expect(second.code).toBe(0);
    expect(second.stdout).toBe(first.stdout);
  });

  it('keeps document order and passes other kinds through', () => {
    const r = cli(['inject', '-f', 'test/golden/multi-document.yaml']);
    expect(r.code).toBe(0);
    const kinds = parseAllDocuments(r.stdout).map((d) => (d.toJS() as { kind: string }).kind);
    expect(kinds).toEqual(['ConfigMap', 'Job', 'Service', 'Job']);
  });

  it('writes warnings to stderr, not stdout', () => {
    const r = cli(['inject', '-f', 'test/golden/invalid-annotations.yaml']);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/warning: Job team-a\/invalid-annotations: Job annotation jobharvest.io\/sink="carrier-pigeon" ignored/);
    expect(r.stdout).not.toMatch(/warning/);
  });

  it('names an ignored record-shaping annotation and the value that applies instead', () => {
    const r = cli(['inject', '-f', 'test/golden/shaping-invalid.yaml', '--config', 'test/golden/config/shaping.yaml']);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(
      'pod template annotation jobharvest.io/multiline-start="(?<=\\\\n)\\\\S" ignored: not an RE2 pattern: lookahead and lookbehind are not supported (they cannot run in linear time); using ^\\[',
    );
    expect(r.stderr).toMatch(/jobharvest.io\/multiline="java,cobol" ignored: unknown rule "cobol"/);
    const e = cli(['explain', '-f', 'test/golden/shaping.yaml', '--config', 'test/golden/config/shaping.yaml']);
    expect(e.stdout).toMatch(/^Job team-a\/shaping: inject \(.*drainSeconds=25, multiline=python,java, multilineStart=".*", parse=json\)$/m);
  });

  it('explain says inject or skip, and why', () => {
    const r = cli(['explain', '-f', 'test/golden/multi-document.yaml']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Job team-a\/first: inject \(mode=node, sink=stdout/m);
    const s = cli(['explain', '-f', 'test/golden/opt-out-job.yaml']);
    expect(s.stdout).toMatch(/Job team-a\/opt-out-job: skip \(opted-out-job\)/);
  });

  it.each([
    ['malformed YAML', ['inject', '-f', '-'], 'kind: Job\n  bad: [\n', /JH_BAD_INPUT: <stdin>/],
    ['a missing file', ['inject', '-f', 'nope.yaml'], undefined, /JH_BAD_INPUT: cannot read nope.yaml: ENOENT/],
    ['a bad sink flag', ['inject', '-f', 'examples/job.yaml', '--sink', 'pigeon'], undefined, /JH_BAD_CONFIG: --sink pigeon/],
    ['a bad ttl flag', ['inject', '-f', 'examples/job.yaml', '--ttl', 'soon'], undefined, /JH_BAD_CONFIG: --ttl soon/],
  ])('fails with one clear line for %s', (_what, args, input, message) => {
    const r = cli(args, input);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(message);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).toBe('');
  });

  it('reports every problem of a bad config file at once', () => {
    const dir = mkdtempSync(join(tmpdir(), 'jh-cli-'));
    const file = join(dir, 'config.yaml');
    writeFileSync(file, 'mode: sideways\nsink:\n  type: pigeon\nttlSecondsAfterFinished: -1\n');
    const r = cli(['inject', '-f', 'examples/job.yaml', '--config', file]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/JH_BAD_CONFIG: invalid configuration: .*mode.*sink\.type.*ttlSecondsAfterFinished/);
  });

  it("a Job whose container mounts one of jobharvest's volumes is printed as it came, with a name-conflict warning, in both modes", () => {
    const volumes = ['jobharvest-pod-logs', 'jobharvest-token', 'jobharvest-state', 'jobharvest-tls'];
    // One document per volume; the token volume is added when the pod turned its own token off.
    const input = volumes
      .map((v) => `apiVersion: batch/v1\nkind: Job\nmetadata: {name: ${v}, namespace: team-a}\nspec: {template: {spec: {restartPolicy: Never, automountServiceAccountToken: false, containers: [{name: main, image: busybox, volumeMounts: [{name: ${v}, mountPath: /peek}]}]}}}\n`)
      .join('---\n');
    for (const mode of ['node', 'api']) {
      const r = cli(['inject', '-f', '-', '--mode', mode, '--sink', 'http', '--endpoint', 'http://logs.example:8080/ingest'], input);
      expect(r.code, mode).toBe(0);
      const jobs = parseAllDocuments(r.stdout).map((d) => d.toJS() as { spec: { template: { spec: Record<string, unknown> } } });
      expect(jobs, mode).toHaveLength(volumes.length);
      for (const [i, v] of volumes.entries()) {
        expect(jobs[i]!.spec.template.spec.initContainers, `${mode} ${v}`).toBeUndefined();
        expect(jobs[i]!.spec.template.spec.volumes, `${mode} ${v}`).toBeUndefined();
        expect(r.stderr, `${mode} ${v}`).toContain(`warning: Job team-a/${v}: container "main" mounts the volume "${v}", which is jobharvest's; Job admitted without the log sidecar`);
      }
    }
  });
});
