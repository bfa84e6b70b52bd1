// `npm run bench:harvester-memory`: what the leader holds per kept pod report
// (harvester/pod-reports.ts) and per watched Job (harvester/pod-watches.ts),
// measured as live heap after a full collection, in this process, without a
// cluster. Pods and Jobs are parsed from JSON, as the API client hands them on,
// so no string is shared with the script's own.
//
//   - kept pod: PODS pods of verified Jobs, each with 64 KiB of env the summary
//     must not keep, in three message sizes: a sidecar's usual report, 1 KiB,
//     and the kubelet's cap of 4096 bytes. Each row gives the measured heap
//     per pod beside the estimate the byte budget counts (which must not be
//     below it) and how many such pods fit in the default budget.
//   - watched Job: JOBS verified Jobs in NAMESPACES namespaces, as the Job
//     watch feeds them (the watches' connections are not in this figure: one
//     per namespace, see docs/harvester.md).
//   - the uninjected case: 300 pods of a Job that does not verify, each with
//     1 MiB of env: the heap they leave behind.
//
// Prints `kept_pod message_bytes=… heap_bytes_per_pod=… estimate_bytes_per_pod=… fit_in_default_budget=…`,
// `watched_job heap_bytes_per_job=… namespaces=…` and `uninjected_pods=300 heap_growth_MiB=…`.
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { sidecarDigest } from '../../src/contract/signature.ts';
import { DEFAULT_BUDGET_BYTES, PodReports } from '../../harvester/pod-reports.ts';
import { PodWatches } from '../../harvester/pod-watches.ts';

const PODS = Number(process.env.PODS ?? 20_000);
const JOBS = Number(process.env.JOBS ?? 20_000);
const NAMESPACES = Number(process.env.NAMESPACES ?? 200);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npm run bench:harvester-memory)');

function heap(): number {
  gc!();
  gc!();
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

const sidecar = { name: 'jobharvest', image: 'ghcr.io/jobharvest/jobharvest:1', restartPolicy: 'Always', args: ['/app/sidecar.mjs'], env: [{ name: 'JOBHARVEST_SINK', value: 'http' }] };

function job(namespace: string, i: number): V1Job {
  return JSON.parse(
    JSON.stringify({
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { name: `build-${i}`, namespace, uid: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`, labels: { 'jobharvest.io/injected': 'true' }, annotations: { 'jobharvest.io/signature': 'v1.x'.padEnd(60, 'x') } },
      spec: { template: { spec: { restartPolicy: 'Never', initContainers: [sidecar], containers: [{ name: 'main', image: 'busybox' }] } } },
    }),
  ) as V1Job;
}

function pod(j: V1Job, i: number, message: string, envBytes: number, verified = true): V1Pod {
  return JSON.parse(
    JSON.stringify({
      metadata: {
        name: `${j.metadata!.name}-${String(i).padStart(5, '0')}`,
        namespace: j.metadata!.namespace,
        uid: `11111111-0000-4000-8000-${String(i).padStart(12, '0')}`,
        labels: { 'batch.kubernetes.io/controller-uid': j.metadata!.uid },
        ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: j.metadata!.name, uid: j.metadata!.uid, controller: true }],
      },
      spec: { initContainers: [verified ? sidecar : { name: 'jobharvest', image: 'busybox', env: [{ name: 'BULK', value: `${i}`.padEnd(envBytes, 'e') }] }], containers: [{ name: 'main', image: 'busybox', env: [{ name: 'BULK', value: `${i}`.padEnd(envBytes, 'e') }] }] },
      status: { phase: 'Failed', initContainerStatuses: [{ name: 'jobharvest', image: 'x', imageID: '', ready: false, restartCount: 0, state: { terminated: { exitCode: 0, reason: 'Completed', message } } }] },
    }),
  ) as V1Pod;
}

const watchesFor = () =>
  new PodWatches({
    open: () => ({ stop: () => undefined }),
    cares: () => true,
    // The digest computed afresh for each Job, as verifyInjection does (an HMAC check aside).
    verify: (j) => (j.metadata?.annotations?.['jobharvest.io/signature'] ? sidecarDigest(j.spec!.template.spec!.initContainers![0] as never) : undefined),
  });

// A sidecar's usual report (counts and one run position), 1 KiB, and the cap.
const usual = '{"v":1,"state":"complete","mode":"node","sink":"http","shipped":123456,"unsent":0,"dead_lettered":0,"runs":[["main",0,"2026-01-01T00:00:01Z",1]],"done":["main/0"]}';
// Each measure in a function of its own, so nothing of one is still reachable in the next.
function keptPods(message: string): void {
  const watches = watchesFor();
  const jobs = Array.from({ length: 20 }, (_, k) => job('team-a', k));
  for (const j of jobs) watches.observe(j);
  const reports = new PodReports({ container: 'jobharvest', trusted: (ns, uid) => watches.trusted(ns, uid), budgetBytes: 2 ** 40 });
  const before = heap();
  for (let i = 0; i < PODS; i++) reports.observe(pod(jobs[i % 20]!, i, message, 64 * 1024));
  const per = (heap() - before) / PODS;
  const estimate = reports.usedBytes / reports.count;
  console.log(`kept_pod message_bytes=${message.length} heap_bytes_per_pod=${per.toFixed(0)} estimate_bytes_per_pod=${estimate.toFixed(0)} fit_in_default_budget=${Math.floor(DEFAULT_BUDGET_BYTES / estimate)}`);
  if (reports.count !== PODS) throw new Error(`kept ${reports.count} of ${PODS}`);
}

function watchedJobs(): void {
  const watches = watchesFor();
  const before = heap();
  for (let i = 0; i < JOBS; i++) watches.observe(job(`ci-${i % NAMESPACES}`, i));
  const per = (heap() - before) / JOBS;
  if (watches.jobs !== JOBS) throw new Error(`watched ${watches.jobs} of ${JOBS}`);
  console.log(`watched_job heap_bytes_per_job=${per.toFixed(0)} namespaces=${watches.size}`);
}

function uninjected(): void {
  const watches = watchesFor();
  const mine = job('team-a', 0);
  delete mine.metadata!.annotations;
  watches.observe(mine);
  const reports = new PodReports({ container: 'jobharvest', trusted: (ns, uid) => watches.trusted(ns, uid) });
  const before = heap();
  for (let i = 0; i < 300; i++) reports.observe(pod(mine, i, usual, 2 ** 20, false));
  console.log(`uninjected_pods=300 kept=${reports.count} heap_growth_MiB=${((heap() - before) / 2 ** 20).toFixed(2)}`);
}

for (const message of [usual, usual.padEnd(1024, ' '), usual.padEnd(4096, ' ')]) keptPods(message);
watchedJobs();
uninjected();
