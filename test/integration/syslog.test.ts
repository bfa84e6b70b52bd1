import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnvKey } from '../../src/contract/env.ts';
import { writeTestPki, type TestPki } from '../support/test-pki.ts';
import { RsyslogReceiver, ensureRsyslogReceiver, type ReceivedSyslog, type RsyslogInput } from '../harness/servers/rsyslog-receiver.ts';
import { PodScenario, waitForCount } from '../support/pod-scenario.ts';
import { summaryNumber } from '../support/sidecar.ts';

const SD_ID = 'k8s@32473';
const sdOf = (m: ReceivedSyslog) => m.sd[SD_ID] ?? {};
const tally: string[] = [];

/** RFC 5424 carries at most microseconds: the CRI time cut to 6 fraction digits. */
const micro = (ts: string) => ts.replace(/(\.\d{1,6})\d*Z$/, '$1Z');

function mineOf(r: RsyslogReceiver, uid: string): ReceivedSyslog[] {
  return r.received().filter((m) => sdOf(m)['k8s.pod.uid'] === uid);
}

/** Waits until the receiver holds `n` of the pod's messages, then a little longer to catch late duplicates. */
async function settle(r: RsyslogReceiver, uid: string, n: number): Promise<ReceivedSyslog[]> {
  await waitForCount(async () => mineOf(r, uid).length, n, 30_000);
  await new Promise((res) => setTimeout(res, 500));
  return mineOf(r, uid);
}

function counts(msgs: ReceivedSyslog[]) {
  const distinct = new Set(msgs.map((m) => sdOf(m)['jobharvest.id'])).size;
  return { received: msgs.length, distinct, duplicated: msgs.length - distinct };
}

describe('syslog sink against a real rsyslog', () => {
  let dir: string;
  let pki: TestPki;
  beforeAll(async () => {
    // A first run installs rsyslog and its TLS/RELP modules: under the hook timeout, not a test's.
    ensureRsyslogReceiver((m) => console.log(`[rsyslog] ${m}`));
    dir = mkdtempSync(join(tmpdir(), 'jh-syslog-it-'));
    pki = await writeTestPki(dir);
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
    console.log('syslog tally (written/received/distinct/duplicated):');
    for (const t of tally) console.log(`  ${t}`);
  });

  const variants: Array<{ name: string; input: () => RsyslogInput; settings: () => Partial<Record<EnvKey, string>> }> = [
    { name: 'octet-counting over TCP (imtcp)', input: () => ({ kind: 'tcp' }), settings: () => ({}) },
    {
      name: 'octet-counting over TLS with a client certificate (imtcp + gtls, x509/certvalid)',
      input: () => ({ kind: 'tls', caFile: pki.files.ca, certFile: pki.files.serverCert, keyFile: pki.files.serverKey }),
      settings: () => ({ TLS_CA_FILE: pki.files.ca, TLS_CERT_FILE: pki.files.clientCert, TLS_KEY_FILE: pki.files.clientKey }),
    },
    { name: 'RELP (imrelp)', input: () => ({ kind: 'relp' }), settings: () => ({ SYSLOG_PROTOCOL: 'relp' }) },
  ];

  for (const v of variants) {
    it(`${v.name}: N lines written arrive as exactly N messages with their metadata`, async () => {
      const rs = await RsyslogReceiver.start({ input: v.input(), maxMessageSize: 8192 });
      const pod = new PodScenario('syslog');
      const id = pod.identity;
      try {
        pod.writeLines('init', 50, { stream: 'stdout' });
        pod.writeLines('jobharvest', 10);
        const sidecar = pod.startSidecar('syslog', rs.endpoint, { BATCH_MAX_WAIT_MS: '200', SYSLOG_MAX_MESSAGE_BYTES: '8192', SYSLOG_FACILITY: 'local3', ...v.settings() });
        await sidecar.waitForLog('sidecar started');
        // Its 40 KiB line is over the receiver's 8 KiB limit, so it arrives cut, with the marker.
        const { probeTs } = pod.writeCountWorkload();
        const written = pod.written(['jobharvest']);

        const exit = await sidecar.stop();
        expect(exit.code, sidecar.tail()).toBe(0);
        expect(summaryNumber(exit.summary, 'lines_shipped')).toBe(written);
        expect(summaryNumber(exit.summary, 'lines_unsent')).toBe(0);
        expect(summaryNumber(exit.summary, 'lines_dead_lettered')).toBe(0);

        const msgs = await settle(rs, id.uid, written);
        const c = counts(msgs);
        tally.push(`count ${v.name}: ${written}/${c.received}/${c.distinct}/${c.duplicated}`);
        expect(c, rs.logTail()).toEqual({ received: written, distinct: written, duplicated: 0 });

        // Header fields: APP-NAME = container, PROCID = pod, MSGID = stream, HOSTNAME = node.
        expect(msgs.every((m) => m.procid === id.pod && m.hostname === id.node && m.facility === 19)).toBe(true);
        const by = (app: string, msgid: string, restart: string) => msgs.filter((m) => m.app === app && m.msgid === msgid && sdOf(m)['k8s.container.restart_count'] === restart);
        expect(by('init', 'stdout', '0')).toHaveLength(50);
        expect(by('main', 'stdout', '0')).toHaveLength(300);
        expect(by('main', 'stderr', '0')).toHaveLength(101);
        expect(by('main', 'stdout', '1')).toHaveLength(101);
        expect(msgs.filter((m) => m.app === 'jobharvest'), "the sidecar's own logs").toHaveLength(0);
        // Severity per stream (defaults: stdout=info, stderr=err).
        expect(msgs.every((m) => m.severity === (m.msgid === 'stderr' ? 3 : 6))).toBe(true);
        // The structured data carries the Kubernetes metadata.
        for (const m of msgs) {
          expect(sdOf(m)).toMatchObject({ 'k8s.namespace.name': id.namespace, 'k8s.pod.name': id.pod, 'k8s.pod.uid': id.uid, 'k8s.job.name': id.job, 'k8s.node.name': id.node, 'k8s.container.name': m.app });
        }
        // The timestamp is the CRI one (cut to microseconds); the exact one is in the SD.
        const probe = msgs.find((m) => m.msg === `PROBE-${id.uid}`)!;
        expect(probe.timestamp).toBe(micro(probeTs));
        expect(sdOf(probe).time).toBe(probeTs);
        const long = msgs.find((m) => m.msg.startsWith(`LONG-${id.uid}`))!;
        expect(Buffer.byteLength(long.msg)).toBeLessThan(8192);
        expect(long.msg.endsWith('[jobharvest: truncated to the syslog message limit]')).toBe(true);
        expect(sdOf(long)['jobharvest.truncated']).toBe('true');
      } finally {
        pod.dispose();
        await rs.dispose();
      }
    });
  }

  for (const v of [variants[0]!, variants[2]!]) {
    it(`${v.name}: an rsyslog restart mid-stream loses nothing`, async () => {
      const rs = await RsyslogReceiver.start({ input: v.input() });
      const pod = new PodScenario('syslog-restart');
      try {
        const sidecar = pod.startSidecar('syslog', rs.endpoint, { BATCH_MAX_WAIT_MS: '100', BATCH_MAX_RECORDS: '200', ...v.settings() });
        await sidecar.waitForLog('sidecar started');
        const writing = pod.writeOver('main', 6000, 3000, { stream: 'both', size: 120 });
        await new Promise((r) => setTimeout(r, 1200));
        await rs.restart(300);
        await writing;
        const written = pod.written();
        await waitForCount(async () => new Set(mineOf(rs, pod.identity.uid).map((m) => sdOf(m)['jobharvest.id'])).size, written, 60_000);
        const exit = await sidecar.stop();
        expect(exit.code, sidecar.tail()).toBe(0);
        expect(summaryNumber(exit.summary, 'lines_unsent')).toBe(0);
        const c = counts(await settle(rs, pod.identity.uid, written));
        tally.push(`restart ${v.name}: ${written}/${c.received}/${c.distinct}/${c.duplicated} (retries ${summaryNumber(exit.summary, 'retries')})`);
        expect(c.distinct, rs.logTail()).toBe(written);
        // Only batches in flight or settling when rsyslog went away are resent (4 in flight x 200 records).
        expect(c.duplicated).toBeLessThanOrEqual(4 * 200);
      } finally {
        pod.dispose();
        await rs.dispose();
      }
    });
  }
});
