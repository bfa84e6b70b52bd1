import type { ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { cpSync, createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../support/ports.ts';
import { spawnLogged, tailFile, terminate, waitStarted } from '../../support/process.ts';
import { keyedDir } from './cache.ts';

const SOURCE = join(dirname(fileURLToPath(import.meta.url)), 'opensearch');
const LAUNCHER = 'src/main/java/jobharvest/Launcher.java';

/**
 * Java 17 and Maven on PATH: the only way this node can be built here. Under
 * CI=true a missing toolchain is installed from Debian's packages (the machine
 * image has them, but a run must not depend on that), and a skip would hide
 * lost coverage, so it is an error instead.
 */
export function openSearchBuildable(): boolean {
  const present = () => {
    try {
      execFileSync('java', ['-version'], { stdio: 'ignore' });
      execFileSync('mvn', ['-v'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  if (present()) return true;
  if (process.env.CI !== 'true') return false;
  execFileSync('sh', ['-c', 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven'], { stdio: 'inherit' });
  if (!present()) throw new Error('CI=true: java 17 and mvn are still missing after apt-get install; the OpenSearch tests cannot run');
  return true;
}

/**
 * Builds the launcher (test/harness/servers/opensearch/: pom.xml pins
 * OpenSearch 2.19.x, the last line on Java 17) with Maven into the shared
 * cache, keyed by the pom, the launcher and the Java version. Returns the classpath.
 */
export function ensureOpenSearch(log: (msg: string) => void = () => {}): string {
  // java -version writes to stderr.
  const javaVersion = execFileSync('sh', ['-c', 'java -version 2>&1'], { encoding: 'utf8' });
  const dir = keyedDir('servers', ['opensearch', readFileSync(join(SOURCE, 'pom.xml')), readFileSync(join(SOURCE, LAUNCHER)), javaVersion]);
  const classpath = `${join(dir, 'target', 'classes')}:${join(dir, 'target', 'lib', '*')}`;
  if (existsSync(join(dir, 'done'))) return classpath;
  mkdirSync(dirname(dir), { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  cpSync(SOURCE, tmp, { recursive: true });
  log(`building the OpenSearch launcher into ${dir}`);
  const started = Date.now();
  try {
    execFileSync('mvn', ['-B', '-q', '-DskipTests', 'package'], { cwd: tmp, stdio: ['ignore', 'inherit', 'inherit'] });
    cpSync(join(tmp, 'pom.xml'), join(tmp, 'done'));
    rmSync(dir, { recursive: true, force: true });
    renameSync(tmp, dir);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  log(`built the OpenSearch launcher in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return classpath;
}

/** A real single-node OpenSearch on 127.0.0.1 with its own data folder. */
export class OpenSearch {
  readonly dir: string;
  readonly logFile: string;
  private child: ChildProcess | undefined;
  private logStream: WriteStream | undefined;
  private portValue = 0;

  private constructor(private readonly classpath: string) {
    this.dir = mkdtempSync(join(tmpdir(), 'jh-opensearch-'));
    this.logFile = join(this.dir, 'opensearch.log');
  }

  static async start(): Promise<OpenSearch> {
    const os = new OpenSearch(ensureOpenSearch());
    await os.start();
    return os;
  }

  get url(): string {
    return `http://127.0.0.1:${this.portValue}`;
  }

  async start(): Promise<void> {
    if (this.portValue === 0) this.portValue = await freePort();
    this.logStream = createWriteStream(this.logFile, { flags: 'a' });
    // Two shared cores: a small heap and one GC thread keep it a good neighbour.
    this.child = spawnLogged('java', ['-Xms256m', '-Xmx512m', '-XX:+UseSerialGC', '-cp', this.classpath, 'jobharvest.Launcher', join(this.dir, 'home'), String(this.portValue)], this.logStream);
    const health = `${this.url}/_cluster/health`;
    await waitStarted(this.child, 'opensearch', async () => (await fetch(health, { signal: AbortSignal.timeout(2000) })).ok, 120_000, this.logFile);
  }

  async dispose(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child) await terminate(child, 30_000);
    this.logStream?.end();
    rmSync(this.dir, { recursive: true, force: true });
  }

  logTail(lines = 40): string {
    return tailFile(this.logFile, lines);
  }

  /** Makes everything indexed so far searchable; false when the index does not exist yet. */
  async refresh(index = '_all'): Promise<boolean> {
    const res = await fetch(`${this.url}/${index}/_refresh`, { method: 'POST' });
    if (res.status === 404) return false;
    if (!res.ok) throw new Error(`_refresh: HTTP ${res.status} ${await res.text()}`);
    return true;
  }

  /** Documents in an index, and how many distinct values of a keyword field they have. */
  async countWithDistinct(index: string, field: string, query: object = { match_all: {} }): Promise<{ total: number; distinct: number }> {
    // The sink creates the index with its first document.
    if (!(await this.refresh(index))) return { total: 0, distinct: 0 };
    const res = await fetch(`${this.url}/${index}/_search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ size: 0, track_total_hits: true, query, aggs: { d: { cardinality: { field, precision_threshold: 40000 } } } }),
    });
    const body = (await res.json()) as { hits: { total: { value: number } }; aggregations: { d: { value: number } } };
    if (!res.ok) throw new Error(`_search: HTTP ${res.status} ${JSON.stringify(body)}`);
    return { total: body.hits.total.value, distinct: body.aggregations.d.value };
  }
}
