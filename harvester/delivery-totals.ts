// What the delivery records say, summed for Prometheus: the sidecars' counts
// reach the harvester through their termination messages and end up in each
// Job's record, so nobody needs to scrape thousands of short-lived pods.
//
// Cluster-wide totals, every series there from the start at 0 (an alert's
// increase() sees the first loss), and the same per Job namespace. Namespaces
// are tenant-created: the first `maxNamespaces` seen get a label value of their
// own for the life of the process, every later one is folded into OTHER, so the
// series stay bounded whatever tenants create.
import type { DeliveryRecord } from '../src/contract/harvest.ts';

/**
 * The folded namespaces' label value. Parentheses are not allowed in a
 * namespace name (a DNS label), so no real namespace can be mistaken for it.
 */
export const OTHER = '(other)';

export const DEFAULT_MAX_NAMESPACES = 200;

/** What one record says about its Job, as a label value. */
export const RESULTS = ['complete', 'incomplete', 'unverified', 'missed'] as const;
export type RecordResult = (typeof RESULTS)[number];

/** `harvested` lines are also in `shipped`: those the harvester sent itself, after the sidecar. */
export const LINE_OUTCOMES = ['shipped', 'lost', 'harvested'] as const;
export type LineOutcome = (typeof LINE_OUTCOMES)[number];

export interface Totals {
  readonly records: Record<RecordResult, number>;
  readonly lines: Record<LineOutcome, number>;
  unaccountedPods: number;
}

function zero(): Totals {
  return { records: { complete: 0, incomplete: 0, unverified: 0, missed: 0 }, lines: { shipped: 0, lost: 0, harvested: 0 }, unaccountedPods: 0 };
}

/**
 * missed: the Job ran without the sidecar; unverified: its injection could
 * not be verified, so nothing was harvested; complete: every line of every
 * pod is at the log server; incomplete: anything else.
 */
export function recordResult(d: DeliveryRecord, unverified: boolean): RecordResult {
  if (unverified) return 'unverified';
  if (d.injection === 'missed') return 'missed';
  return d.lost === 0 && d.unaccounted === 0 && !d.resume_gaps ? 'complete' : 'incomplete';
}

export class DeliveryTotals {
  readonly all: Totals = zero();
  private readonly byNamespace = new Map<string, Totals>();

  constructor(readonly maxNamespaces: number = DEFAULT_MAX_NAMESPACES) {
    if (!Number.isInteger(maxNamespaces) || maxNamespaces < 0) throw new Error(`maxNamespaces must be a whole number, got ${maxNamespaces}`);
  }

  /** Counts one delivery record written for a Job of `namespace`. */
  add(namespace: string, d: DeliveryRecord, result: RecordResult): void {
    for (const t of [this.all, this.slot(namespace)]) {
      t.records[result]++;
      t.lines.shipped += d.shipped;
      t.lines.lost += d.lost;
      t.lines.harvested += d.harvested ?? 0;
      t.unaccountedPods += d.unaccounted;
    }
  }

  /** The per-namespace totals, OTHER among them once a namespace was folded. */
  namespaces(): ReadonlyMap<string, Totals> {
    return this.byNamespace;
  }

  private slot(namespace: string): Totals {
    const own = this.byNamespace.get(namespace);
    if (own) return own;
    const named = this.byNamespace.size - (this.byNamespace.has(OTHER) ? 1 : 0);
    const label = named < this.maxNamespaces ? namespace : OTHER;
    let t = this.byNamespace.get(label);
    if (!t) {
      t = zero();
      this.byNamespace.set(label, t);
    }
    return t;
  }
}
