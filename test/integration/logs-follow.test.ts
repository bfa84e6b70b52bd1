/**
 * `jobharvest logs --follow` against the real servers: a pod writes for 20 s
 * through the real sidecar into a real VictoriaLogs (loki sink) and a real
 * OpenSearch (elasticsearch sink), and the follow loop, with the query client
 * the command uses, prints every line once, in order, while they arrive, and
 * ends by itself once the pod's delivery is done: VictoriaLogs through its live
 * tail (/select/logsql/tail), OpenSearch by polling after the cursor. There is no cluster here:
 * the Job's state is the sidecar's own (running, then exited after its last
 * acknowledgement, as the delivery report records it); test/unit/logs.test.ts
 * covers the states one by one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { followLines, parseOptions, type JobState } from '../../src/cli/logs.ts';
import { ElasticsearchClient } from '../../src/query/elasticsearch.ts';
import type { QueryClient } from '../../src/query/types.ts';
import { FIELD_MAPS, VictoriaLogsClient } from '../../src/query/victorialogs.ts';
import { OpenSearch, openSearchBuildable } from '../harness/servers/opensearch.ts';
import { VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { PodScenario } from '../support/pod-scenario.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';

const SECONDS = 20;
const LINES = 400;

async function followPod(name: string, sink: 'loki' | 'elasticsearch', endpoint: string, client: QueryClient): Promise<void> {
  const pod = new PodScenario(name);
  try {
    const sidecar = pod.startSidecar(sink, endpoint, { BATCH_MAX_WAIT_MS: '200' });
    await sidecar.waitForLog('sidecar started');
    let exited = false;
    const jobState = async (): Promise<JobState> => (exited ? 'delivered' : 'running');
    const o = parseOptions(`job/${pod.identity.job}`, { chartNamespace: 'jobharvest', follow: true, pollInterval: '500ms', pageSize: '50' }, {});
    const printed: Array<{ message: string; at: number }> = [];
    const started = Date.now();
    const follow = (async () => {
      for await (const l of followLines(client, { namespace: pod.identity.namespace, job: pod.identity.job! }, o, jobState)) printed.push({ message: l.message, at: Date.now() - started });
    })();
    // The pod's main container writes for 20 s, on both streams; then it exits and the sidecar drains.
    await pod.writeOver('main', LINES, SECONDS * 1000, { stream: 'both', size: 80 });
    const writtenAt = Date.now() - started;
    const exit = await sidecar.stop();
    expect(exit.code, sidecar.tail()).toBe(0);
    exited = true;
    await follow;
    const doneAt = Date.now() - started;
    const numbers = printed.map((p) => Number(/ #(\d+) /.exec(p.message)![1]));
    console.log(`${name}: ${printed.length} lines followed; ${printed.filter((p) => p.at < writtenAt).length} printed while the pod wrote; ended ${((doneAt - writtenAt) / 1000).toFixed(1)} s after it stopped`);
    expect(numbers).toEqual(Array.from({ length: LINES }, (_, i) => i + 1));
    expect(printed.filter((p) => p.at < writtenAt).length, 'lines printed while the pod was writing').toBeGreaterThan(LINES / 2);
  } finally {
    pod.dispose();
  }
}

describe('jobharvest logs --follow on the real servers', () => {
  let vl: VictoriaLogs;
  let os: OpenSearch | undefined;
  beforeAll(async () => {
    ensureSidecarBundle();
    vl = await VictoriaLogs.start();
    if (openSearchBuildable()) os = await OpenSearch.start();
  }, 600_000);
  afterAll(async () => {
    await vl?.dispose();
    await os?.dispose();
  });

  it('VictoriaLogs: a pod writing for 20 s, every line once, in order, through its live tail, and the follow ends by itself', async () => {
    const tails = async () => {
      const m = /^vl_http_requests_total\{path="\/select\/logsql\/tail"\} (\d+)$/m.exec(await (await fetch(`${vl.url}/metrics`)).text());
      return Number(m?.[1] ?? 0);
    };
    const before = await tails();
    await followPod('follow-vl', 'loki', vl.endpoints.loki, new VictoriaLogsClient(vl.url, FIELD_MAPS.loki));
    expect(await tails(), 'requests to /select/logsql/tail').toBe(before + 1);
  }, 120_000);

  it.skipIf(!openSearchBuildable())('OpenSearch: the same through the elasticsearch sink, polled with search_after', async () => {
    await followPod('follow-os', 'elasticsearch', os!.url, new ElasticsearchClient(os!.url, 'jobharvest'));
  }, 120_000);
});
