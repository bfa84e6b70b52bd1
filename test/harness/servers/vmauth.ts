import type { ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, writeFileSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { freePort } from '../../support/ports.ts';
import { spawnLogged, tailFile, terminate, waitStarted } from '../../support/process.ts';
import { VMAUTH, ensureGoProgram } from './go-build.ts';

/**
 * vmauth (VictoriaMetrics' authenticating proxy, Apache-2.0) on 127.0.0.1 in
 * front of a VictoriaLogs: each user, known by a bearer token, reaches only
 * the paths of its routes, and every request it sends there carries the
 * headers the route sets, which replace any the client sent (vmauth's
 * `headers` option sets them: app/vmauth/main.go, updateHeadersByConfig). So a
 * credential mapped to AccountID 11 writes and reads tenant 11 and no other,
 * whatever AccountID header it sends. A request without a known credential is
 * answered 401 (after vmauth's own 2–3 s delay).
 */
export interface VmauthRoute {
  /** Regular expressions a request's path must match in full, e.g. `/insert/.*`. */
  srcPaths: string[];
  /** The VictoriaLogs base URL. */
  urlPrefix: string;
  /** `Name: value` request headers set on every proxied request (AccountID, ProjectID). */
  headers: string[];
}

export interface VmauthUser {
  name: string;
  bearerToken: string;
  routes: VmauthRoute[];
}

/** The routes of a tenant's writer (`/insert/...`) or reader (`/select/...`) in VictoriaLogs, tenant `accountID:projectID`. */
export function vlTenantRoute(vlUrl: string, kind: 'insert' | 'select', accountID: number, projectID: number): VmauthRoute {
  return { srcPaths: [`/${kind}/.*`], urlPrefix: vlUrl, headers: [`AccountID: ${accountID}`, `ProjectID: ${projectID}`] };
}

export class Vmauth {
  readonly dir: string;
  readonly logFile: string;
  private child: ChildProcess | undefined;
  private logStream: WriteStream | undefined;

  private constructor(
    private readonly bin: string,
    readonly port: number,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), 'jh-vmauth-'));
    this.logFile = join(this.dir, 'vmauth.log');
  }

  /** Builds vmauth from its pin if the cache has none, and starts it on `port` (a free one when unset). */
  static async start(users: VmauthUser[], o: { port?: number; startTimeoutMs?: number } = {}): Promise<Vmauth> {
    const v = new Vmauth(ensureGoProgram(VMAUTH), o.port ?? (await freePort()));
    await v.run(users, o.startTimeoutMs ?? 30_000);
    return v;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private async run(users: VmauthUser[], timeoutMs: number): Promise<void> {
    const config = join(this.dir, 'auth.yml');
    writeFileSync(
      config,
      stringify({
        users: users.map((u) => ({
          name: u.name,
          bearer_token: u.bearerToken,
          url_map: u.routes.map((r) => ({ src_paths: r.srcPaths, url_prefix: r.urlPrefix, headers: r.headers })),
        })),
      }),
    );
    this.logStream = createWriteStream(this.logFile, { flags: 'a' });
    this.child = spawnLogged(this.bin, [`-httpListenAddr=127.0.0.1:${this.port}`, `-auth.config=${config}`, '-loggerLevel=INFO'], this.logStream);
    await waitStarted(this.child, 'vmauth', async () => (await fetch(`${this.url}/health`, { signal: AbortSignal.timeout(1000) })).ok, timeoutMs, this.logFile);
  }

  logTail(lines = 40): string {
    return tailFile(this.logFile, lines);
  }

  async dispose(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child) await terminate(child);
    this.logStream?.end();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
