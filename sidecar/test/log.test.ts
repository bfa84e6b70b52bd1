import { describe, expect, it } from 'vitest';
import { Logger, redactUrl as logRedactUrl } from '../log.ts';

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
