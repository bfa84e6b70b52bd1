import { describe, expect, it } from 'vitest';
import { Logger, redactUrl as logRedactUrl } from '../log.ts';
import { redactUrl, redactUrlsIn, redactUrlText } from '../redact.ts';

describe('redactUrl', () => {
  it('masks the whole userinfo, up to the last @ of the authority', () => {
    expect(redactUrlText('http://alice:S3cr@tPassw0rd@logs')).toBe('http://***@logs');
    expect(redactUrlText('https://token@logs.example:8443/api')).toBe('https://***@logs.example:8443/api');
    // The WHATWG parser escapes the inner @; the password must still vanish whole.
    expect(redactUrl(new URL('http://alice:S3cr@tPassw0rd@logs'))).toBe('http://***@logs/');
    expect(redactUrl(new URL('http://alice:S3cr@tPassw0rd@logs'))).not.toMatch(/alice|S3cr|Passw0rd/);
  });

  it('masks every query value and bare parameters, keeps the names', () => {
    expect(redactUrlText('http://logs/in?token=abc')).toBe('http://logs/in?token=***');
    expect(redactUrlText('http://logs/in?a=1&token=abc&&sig')).toBe('http://logs/in?a=***&token=***&&***');
    expect(redactUrlText('http://u:p@logs/in?token=abc#k=v')).toBe('http://***@logs/in?token=***#***');
  });

  it('leaves URLs without secrets and text that is no URL unchanged', () => {
    expect(redactUrlText('http://logs:3100/loki/api/v1/push')).toBe('http://logs:3100/loki/api/v1/push');
    expect(redactUrlText('/var/log/pods/a_b_c')).toBe('/var/log/pods/a_b_c');
    expect(redactUrl(undefined)).toBeUndefined();
  });

  it('is idempotent', () => {
    const once = redactUrlText('http://a:b@c@logs/?t=1');
    expect(redactUrlText(once)).toBe(once);
  });

  it('finds URLs inside free text', () => {
    expect(redactUrlsIn('connect to http://alice:pw@logs/?token=abc failed: ECONNREFUSED')).toBe('connect to http://***@logs/?token=*** failed: ECONNREFUSED');
  });
});

describe('sidecar log lines', () => {
  it('carry no userinfo or query value, whichever field holds the URL', () => {
    const out: string[] = [];
    const logger = new Logger((l) => out.push(l));
    logger.info('sidecar started', { endpoint: 'http://alice:S3cr@tPassw0rd@logs/in?token=abc' });
    logger.warn('retrying batch', { error: new Error('request to https://bob:hunter2@es:9200/_bulk?api_key=xyz failed') });
    const text = out.join('');
    for (const secret of ['alice', 'S3cr', 'tPassw0rd', 'abc', 'bob', 'hunter2', 'xyz']) expect(text).not.toContain(secret);
    expect(text).toContain('http://***@logs/in?token=***');
    expect(text).toContain('https://***@es:9200/_bulk?api_key=***');
  });

  it("the 'sidecar started' endpoint loses its userinfo and query values", () => {
    expect(logRedactUrl(new URL('http://alice:pw@logs/in?token=abc'))).toBe('http://***@logs/in?token=***');
  });
});
