import { describe, expect, it } from 'vitest';
import { ENV } from '../../src/contract/env.ts';
import { ConfigError, loadConfig, usage } from '../config.ts';
import { DEFAULT_DEAD_LETTER_MAX_BYTES } from '../delivery/deadletter.ts';
import { INCOMPLETE_EXIT_CODE } from '../outcome.ts';
import { testConfig } from '../../test/support/sidecar-helpers.ts';

describe('config', () => {
  it('applies the contract defaults', () => {
    const c = testConfig();
    expect(c.sink).toBe('stdout');
    expect(c.drainMs).toBe(25_000);
    expect(c.maxInFlight).toBe(4);
    expect(c.compression).toBe('none');
    expect(testConfig({ JOBHARVEST_SINK: 'otlp', JOBHARVEST_ENDPOINT: 'http://c:4318' }).compression).toBe('gzip');
    expect(c.identity).toEqual({ namespace: 'team-a', pod: 'job-abc-xyz', podUid: 'uid-1', node: 'node-1', job: 'job-abc' });
  });

  it("reads the Job's uid, the owning CronJob and the template's service name into the identity, each only when set", () => {
    const c = testConfig({ [ENV.JOB_UID.name]: 'job-uid', [ENV.CRONJOB_NAME.name]: 'nightly', [ENV.CRONJOB_UID.name]: 'cj-uid', [ENV.SERVICE_NAME.name]: 'etl' });
    expect(c.identity).toMatchObject({ jobUid: 'job-uid', cronJob: { name: 'nightly', uid: 'cj-uid' }, serviceName: 'etl' });
    expect(testConfig({ [ENV.JOB_UID.name]: '' }).identity).not.toHaveProperty('jobUid');
  });

  it('collects every problem into one error', () => {
    let err: unknown;
    try {
      loadConfig({ JOBHARVEST_SINK: 'loki', JOBHARVEST_BATCH_MAX_BYTES: 'lots', JOBHARVEST_GZIP: 'maybe', JOBHARVEST_TLS_CERT_FILE: '/c.pem' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const msg = (err as Error).message;
    for (const part of ['POD_UID is required', 'JOBHARVEST_ENDPOINT is required', 'JOBHARVEST_BATCH_MAX_BYTES', 'JOBHARVEST_GZIP', 'JOBHARVEST_TLS_KEY_FILE']) {
      expect(msg).toContain(part);
    }
  });

  it('refuses values a sink would put on the wire but no protocol can carry, with the checks the webhook uses', () => {
    const base = { JOBHARVEST_ENDPOINT: 'http://logs:3100' };
    expect(() => testConfig({ ...base, JOBHARVEST_SINK: 'loki', JOBHARVEST_LOKI_TENANT: '团队' })).toThrow(/JOBHARVEST_LOKI_TENANT: a Loki tenant id/);
    expect(() => testConfig({ ...base, JOBHARVEST_SINK: 'http', JOBHARVEST_HEADERS: 'x-team=团队' })).toThrow(/JOBHARVEST_HEADERS .*printable ASCII/);
    expect(() => testConfig({ ...base, JOBHARVEST_SINK: 'elasticsearch', JOBHARVEST_ES_INDEX: 'Logs' })).toThrow(/JOBHARVEST_ES_INDEX: an index name must be lowercase/);
    expect(testConfig({ ...base, JOBHARVEST_SINK: 'loki', JOBHARVEST_LOKI_TENANT: 'team-a' }).lokiTenant).toBe('team-a');
  });

  it('parses headers and auth without echoing secrets in errors', () => {
    const c = testConfig({ JOBHARVEST_SINK: 'http', JOBHARVEST_ENDPOINT: 'https://logs:8443/in', JOBHARVEST_HEADERS: 'X-A=1, x-b = two', JOBHARVEST_AUTH_TOKEN: 's3cret' });
    expect(c.headers).toEqual({ 'x-a': '1', 'x-b': 'two' });
    expect(c.auth.token).toBe('s3cret');
    expect(() => testConfig({ JOBHARVEST_AUTH_TOKEN: 's3cret', JOBHARVEST_AUTH_USERNAME: 'u' })).toThrow(/not both/);
    try {
      testConfig({ JOBHARVEST_AUTH_TOKEN: 's3cret', JOBHARVEST_AUTH_USERNAME: 'u' });
    } catch (e) {
      expect((e as Error).message).not.toContain('s3cret');
    }
  });

  it('usage lists every variable of the contract', () => {
    const text = usage();
    for (const spec of Object.values(ENV)) expect(text).toContain(spec.name);
  });

  it('the contract states the defaults the sidecar applies for its exit code and dead-letter cap', () => {
    expect(ENV.FAILURE_EXIT_CODE.default).toBe(String(INCOMPLETE_EXIT_CODE));
    expect(ENV.DEAD_LETTER_MAX_BYTES.default).toBe(String(DEFAULT_DEAD_LETTER_MAX_BYTES));
    const cfg = loadConfig({ POD_NAME: 'p', POD_NAMESPACE: 'n', POD_UID: 'u' });
    expect(cfg.failureExitCode).toBe(INCOMPLETE_EXIT_CODE);
    expect(cfg.deadLetterMaxBytes).toBe(DEFAULT_DEAD_LETTER_MAX_BYTES);
  });
});
