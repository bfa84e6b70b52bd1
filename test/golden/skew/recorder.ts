/**
 * Records what a release writes that a later release reads back: run inside
 * that release's own source tree (record.ts copies this file there, to the
 * same path, so every import below is the release's code, not this
 * checkout's), it writes into the folder given:
 *
 * - key.txt: the signing key of these recordings (a test key, published here);
 * - job-node.json, job-api.json: a Job as the release's webhook core admitted
 *   it (status annotation, signature, injected label, the sidecar), in node
 *   and api mode, with the uid the API server would then give it;
 * - termination-complete.txt, termination-running.txt: the release's own
 *   sidecar bundle (dist/sidecar.mjs), run on pod logs written as the kubelet
 *   writes them: the termination message after a drain (SIGTERM), and the
 *   snapshot a sidecar left when it was killed (SIGKILL);
 * - summary-complete.json: that first sidecar's closing summary line;
 * - records.ndjson: the records it shipped (stdout sink);
 * - delivery.json, hold.json: a delivery record and a hold as the release's
 *   harvester signs them on job-node.json;
 * - recorded.json: the version, the commit, when.
 */
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseConfig } from '../../../src/core/config.ts';
import { mutateJob } from '../../../src/core/mutate.ts';
import { keyFromText } from '../../../src/contract/signature.ts';
import { encodeDeliveryRecord, holdPatch } from '../../../harvester/hold.ts';
import { PodScenario } from '../../support/pod-scenario.ts';

const [out, version, commit] = process.argv.slice(2);
if (!out || !version || !commit) throw new Error('usage: recorder.ts <out folder> <version> <commit>');
mkdirSync(out, { recursive: true });
const write = (name: string, text: string) => writeFileSync(join(out, name), text);
const json = (v: unknown) => `${JSON.stringify(v, null, 2)}\n`;

const KEY_TEXT = 'jobharvest skew golden signing key (test only, published)';
const key = keyFromText(KEY_TEXT);
write('key.txt', `${KEY_TEXT}\n`);

const config = parseConfig({ sink: { type: 'loki', endpoint: 'http://logs.example:3100/loki/api/v1/push' }, ttlSecondsAfterFinished: 600 });
const namespace = (level: string) => ({ name: 'team-a', annotations: { 'jobharvest.io/inject': 'enabled' }, labels: { 'kubernetes.io/metadata.name': 'team-a', 'pod-security.kubernetes.io/enforce': level } });
const job = (name: string) => ({
  apiVersion: 'batch/v1',
  kind: 'Job',
  metadata: { name, namespace: 'team-a' },
  spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:1.36', command: ['sh', '-c', 'echo hi'] }] } } },
});
const admitted: Record<string, Record<string, any>> = {};
for (const [mode, level] of [['node', 'privileged'], ['api', 'restricted']] as const) {
  const r = mutateJob(job(`skew-${mode}`) as never, { config, namespace: namespace(level) as never, now: Date.parse('2026-12-01T00:00:00Z'), signingKey: key });
  if (r.decision.action !== 'inject') throw new Error(`the ${mode}-mode Job was not injected: ${JSON.stringify(r.decision)}`);
  const j = r.job as Record<string, any>;
  // What the API server adds at creation, which the harvester's signatures are bound to.
  j.metadata.uid = mode === 'node' ? '0b7f8a52-1c3e-4d55-9a0e-5d1f2a3b4c01' : '0b7f8a52-1c3e-4d55-9a0e-5d1f2a3b4c02';
  admitted[mode] = j;
  write(`job-${mode}.json`, json(j));
}

const nodeJob = admitted.node!;
const delivery = { sink: 'loki', pods: 1, shipped: 1234, lost: 0, unaccounted: 0, harvested: 34, notes: ['recorded for the skew contract'] };
write('delivery.json', json({ job: { metadata: { namespace: nodeJob.metadata.namespace, name: nodeJob.metadata.name, uid: nodeJob.metadata.uid } }, value: delivery, annotation: encodeDeliveryRecord(nodeJob as never, key, delivery as never) }));
const held = holdPatch({ ...nodeJob, spec: { ...nodeJob.spec, ttlSecondsAfterFinished: 600 } } as never, key, Date.parse('2026-12-01T00:05:00Z'), Date.parse('2026-12-01T00:05:10Z'), 3600);
if (!held) throw new Error('no hold');
write('hold.json', json({ job: { metadata: { namespace: nodeJob.metadata.namespace, name: nodeJob.metadata.name, uid: nodeJob.metadata.uid } }, value: held.hold, annotation: (held.patch as { metadata: { annotations: Record<string, string> } }).metadata.annotations['jobharvest.io/hold'] }));

// The release's sidecar, as its pods run it: 120 lines, a restart, 30 more.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const complete = new PodScenario('skew-complete');
complete.writeLines('main', 120, { stream: 'both', size: 80 });
complete.writer.container('main').restart();
complete.writeLines('main', 30, { stream: 'stdout', size: 80 });
// The kubelet creates the file the sidecar writes into (and bind-mounts it).
const termination = join(complete.stateDir, 'termination-log');
writeFileSync(termination, '');
const sidecar = complete.startSidecar('stdout', undefined, { TERMINATION_LOG: termination });
await sleep(3000);
const stopped = await sidecar.stop();
if (stopped.code !== 0) throw new Error(`the sidecar exited ${stopped.code}: ${sidecar.stderr.join('\n')}`);
write('termination-complete.txt', readFileSync(termination, 'utf8'));
write('summary-complete.json', json({ written: complete.written(), summary: stopped.summary }));
write('records.ndjson', sidecar.stdout.filter((l) => l.startsWith('{')).map((l) => `${l}\n`).join(''));
complete.dispose();

const running = new PodScenario('skew-running');
running.writeLines('main', 200, { stream: 'stdout', size: 80 });
const snapshot = join(running.stateDir, 'termination-log');
writeFileSync(snapshot, '');
const killed = running.startSidecar('stdout', undefined, { TERMINATION_LOG: snapshot });
for (let i = 0; i < 100 && !(existsSync(snapshot) && readFileSync(snapshot, 'utf8').includes('"running"')); i++) await sleep(100);
await sleep(500);
await killed.kill();
write('termination-running.txt', readFileSync(snapshot, 'utf8'));
write('summary-running.json', json({ written: running.written() }));
running.dispose();

write(
  'recorded.json',
  json({
    version,
    commit,
    recordedAt: new Date().toISOString(),
    by: `npm run golden:skew -- ${version}`,
    how: `test/golden/skew/recorder.ts run in the source tree of ${commit} with its own code: the Jobs by its webhook core (src/core/mutate.ts), delivery.json and hold.json by its harvester (harvester/hold.ts), the termination messages, summary and records by its sidecar bundle (dist/sidecar.mjs, built by its npm run build) on kubelet-format pod logs; the signing key is key.txt`,
  }),
);
console.log(`recorded ${version} (${commit.slice(0, 7)}) into ${out}`);
