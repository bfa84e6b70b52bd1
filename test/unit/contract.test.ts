import { describe, expect, it } from 'vitest';
import { credentialQueryParameter } from '../../src/contract/endpoint.ts';
import { redactUrls } from '../../src/contract/redact.ts';
import { esIndexProblem, forwardTagProblem, headerListProblem, lokiTenantProblem } from '../../src/contract/values.ts';

describe('redactUrls', () => {
  it.each([
    ['http://alice:S3cr@tPassw0rd@logs', 'http://***@logs'],
    ['http://alice:pass word@logs:8080/x', 'http://***@logs:8080/x'],
    ['http://alice:pa/ss@logs/path', 'http://***@logs/path'],
    ['tls://u:p@syslog:6514', 'tls://***@syslog:6514'],
    ['https://logs/x?access_token=abc&stream=1#frag', 'https://logs/x?access_token=***&stream=***#***'],
    ['http://logs/in?a=1&token=abc&&sig', 'http://logs/in?a=***&token=***&&***'],
    ['https://token@logs.example:8443/api', 'https://***@logs.example:8443/api'],
    ['connect to http://alice:pw@logs/?token=abc failed: ECONNREFUSED', 'connect to http://***@logs/?token=*** failed: ECONNREFUSED'],
    ['/var/log/pods/a_b_c', '/var/log/pods/a_b_c'],
    ['http://logs:3100/loki/api/v1/push', 'http://logs:3100/loki/api/v1/push'],
    ['no url here, user@example.com', 'no url here, user@example.com'],
  ])('%s → %s', (input, output) => {
    expect(redactUrls(input)).toBe(output);
  });
  it('stops at the quote that ends a JSON string, leaving the rest of a log line intact', () => {
    const line = JSON.stringify({ msg: 'sidecar started', endpoint: 'http://alice:S3cr@tPassw0rd@logs/in?token=abc', owner: 'ops@example.com' });
    const r = redactUrls(line);
    expect(JSON.parse(r)).toEqual({ msg: 'sidecar started', endpoint: 'http://***@logs/in?token=***', owner: 'ops@example.com' });
  });
  it('hides a password that holds a quote, raw or JSON-escaped, and still stops at the quote that closes a string', () => {
    expect(redactUrls('https://svc-user:Pa"ssw0rd@vl.logging:9428/x')).toBe('https://***@vl.logging:9428/x');
    expect(redactUrls('endpoint "https://svc-user:Pa"ssw0rd@vl:9428" ignored')).toBe('endpoint "https://***@vl:9428" ignored');
    expect(redactUrls('https://u:pass"@vl:9428')).toBe('https://***@vl:9428');
    expect(redactUrls('https://u:Pa",ss@vl:9428 ignored')).toBe('https://***@vl:9428 ignored');
    const line = JSON.stringify({ msg: 'sink', endpoint: 'https://svc-user:Pa"ssw0rd@vl:9428/in', owner: 'ops@example.com' });
    const r = redactUrls(line);
    expect(r).not.toContain('ssw0rd');
    expect(JSON.parse(r)).toEqual({ msg: 'sink', endpoint: 'https://***@vl:9428/in', owner: 'ops@example.com' });
    // As an admission warning shows it: redacted, then quoted.
    const warning = `Job annotation jobharvest.io/endpoint=${JSON.stringify(redactUrls('https://svc-user:Pa"ssw0rd@vl:9428'))} ignored`;
    expect(warning).not.toContain('Pa');
  });
  it('hides the whole password of a URL object, whose parser escaped the inner @', () => {
    const u = new URL('http://alice:S3cr@tPassw0rd@logs');
    expect(redactUrls(u.href)).toBe('http://***@logs/');
  });
  it('treats several URLs on a line apart, and is idempotent', () => {
    const s = 'endpoint "http://a:b@one" ignored; using https://two/?key=k';
    const r = redactUrls(s);
    expect(r).toBe('endpoint "http://***@one" ignored; using https://two/?key=***');
    expect(redactUrls(r)).toBe(r);
  });
});

describe('contract value checks', () => {
  it('finds credential-like query parameters', () => {
    expect(credentialQueryParameter(new URL('https://x/?a=1&Access_Token=2'))).toBe('Access_Token');
    expect(credentialQueryParameter(new URL('https://x/?stream=1&tenant=2'))).toBeUndefined();
  });
  it('checks header lists as the sidecar reads them', () => {
    expect(headerListProblem('X-A=1, X-B = two words ,')).toBeUndefined();
    expect(headerListProblem('X-A=团队')).toMatch(/printable ASCII/);
    expect(headerListProblem('X A=1')).toMatch(/header name/);
    expect(headerListProblem('novalue')).toMatch(/not name=value/);
  });
  it('checks Loki tenants, index names and forward tags', () => {
    expect(lokiTenantProblem('team-a')).toBeUndefined();
    expect(lokiTenantProblem('..')).toBeDefined();
    expect(lokiTenantProblem('x'.repeat(151))).toBeDefined();
    expect(esIndexProblem('logs-2024.01')).toBeUndefined();
    expect(esIndexProblem('_logs')).toBeDefined();
    expect(esIndexProblem('a:b')).toBeDefined();
    expect(forwardTagProblem('kube.${namespace}.${job}.${container}')).toBeUndefined();
    expect(forwardTagProblem('kube.${node}.${stream}')).toBeUndefined();
    expect(forwardTagProblem('kube.{x}')).toBeDefined();
  });
});
