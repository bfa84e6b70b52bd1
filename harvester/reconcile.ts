// reconcile(key) for one finished Job: verify it, report where its logs went
// and, where a sidecar could not finish, hold the Job, ship the rest, and
// release it. State lives on the Job only (signed annotations), so any
// replica, or this one after a restart, picks up where the last one stopped.
//
// The API cost per Job: one read, one pod list, one patch (two with a hold),
// one Event. Every write carries the resourceVersion it read, so a slower
// writer gets a conflict and looks again instead of overwriting.
import type { CoreV1Event, V1Job, V1Pod } from '@kubernetes/client-node';
import { ENV, NAMES } from '../src/contract/env.ts';
import { redactUrl } from '../src/contract/redact.ts';
import type { VerifyingKeys } from '../src/contract/signature.ts';
import { DELIVERY_ANNOTATION, LOGS_URL_ANNOTATION } from '../src/contract/harvest.ts';
import { renderLogsUrl } from '../src/contract/logs-url.ts';
import { namespaceGoing, REFUSED_GRACE_MS, refused } from './api-errors.ts';
import { matchDestination, type Destination } from './destinations.ts';
import { deliveryRecordOf, encodeDeliveryRecord, holdDeadline, holdOf, holdPatch, needsHold, recordPatch, releasePatch, type Hold } from './hold.ts';
import type { Log } from './log.ts';
import type { ReconcileResult } from './queue.ts';
import type { MissedCheck } from './missed.ts';
import { deliveryEvent, missedEvent, deliveryOf, finishedAt, jobFinished, needsHarvest, nodeLost, podDone, podOutcome, withResumeGaps, type DeliveryRecord, type DeliveryUsage, type PodOutcome } from './report.ts';
import { usageOf } from './usage.ts';
import { recordResult, type RecordResult } from './delivery-totals.ts';
import type { ShipRequest, ShipResult } from './ship.ts';
import { ownedPods, recordedUnderDroppedKey, verifyInjection } from './trust.ts';
import type { KubeAccess, ShipLimits } from './ship.ts';
import type { Slots } from './slots.ts';


export type WriteResult = 'ok' | 'conflict' | 'gone';

/** The Kubernetes calls reconcile makes; the edge (harvester/kube.ts) implements them, tests fake them. */
export interface HarvestApi {
  /** undefined: not found. */
  readJob(namespace: string, name: string): Promise<V1Job | undefined>;
  /** Pods labelled with the Job's controller-uid (a filter only: ownership is checked here). */
  listPods(namespace: string, jobUid: string): Promise<V1Pod[]>;
  /** JSON merge patch. */
  patchJob(namespace: string, name: string, patch: object): Promise<WriteResult>;
  createEvent(namespace: string, event: CoreV1Event): Promise<void>;
  /**
   * The node controller's NodeNotReady Events about pods in the namespace: the
   * one trace a pod lost with its node leaves once the pod object is gone.
   */
  listNodeNotReadyEvents(namespace: string): Promise<CoreV1Event[]>;
}

export interface ReconcilerOptions {
  readonly api: HarvestApi;
  /** Signs with the current key; verifies with it and the previous ones (signing.previousKeys). */
  readonly key: VerifyingKeys;
  readonly destinations: readonly Destination[];
  /** 0: report only, never hold or ship. */
  readonly maxHoldSeconds: number;
  readonly limits: ShipLimits;
  /** Harvests at once (--concurrency); unset: as many as reconciles run. */
  readonly harvests?: Pick<Slots, 'run'>;
  readonly kube: KubeAccess;
  readonly ship: (req: ShipRequest) => Promise<ShipResult>;
  readonly log: Log;
  /** How long a finished Job's pods may take to be done before what is known is reported. */
  readonly podsDoneTimeoutMs?: number;
  readonly retryMs?: number;
  readonly now?: () => number;
  /** Names this process in Events and to the servers it sends to. */
  readonly identity?: string;
  /**
   * False once this replica may no longer act (see ShipRequest.mayWrite);
   * checked before each write to the API as well. Unset: always.
   */
  readonly mayWrite?: () => boolean;
  /**
   * The operator's logs-url template: the link is rewritten with the Job's uid
   * and its real end time once it is done (at admission neither is known).
   */
  readonly logsUrlTemplate?: string;
  /** The last state of Job pods that are gone (harvester/pod-reports.ts): their sidecars' counts. */
  readonly reports?: { gone(jobUid: string | undefined, listed: readonly V1Pod[]): V1Pod[]; forget(jobUid: string | undefined): void };
  /**
   * Whether a Job whose injection does not verify missed it (harvester/missed.ts),
   * with the namespace as the harvester knows it now. Unset: none is looked for.
   */
  readonly missed?: (job: V1Job) => MissedCheck;
  /** Called once per delivery record written for a Job that missed injection (the metric). */
  readonly onMissed?: () => void;
  /** Called once per delivery record written, with what it says (the delivery metrics, harvester/delivery-totals.ts). */
  readonly onRecord?: (namespace: string, delivery: DeliveryRecord, result: RecordResult) => void;
}

export const EVENT_SOURCE = 'jobharvest';

export class Reconciler {
  private readonly now: () => number;
  private readonly may: () => boolean;
  private readonly podsDoneTimeoutMs: number;
  private readonly retryMs: number;
  /** Keys whose pods the API refused, and since when (for the log level only; each is let go once its key is done). */
  private readonly refusedSince = new Map<string, number>();

  constructor(private readonly o: ReconcilerOptions) {
    this.now = o.now ?? Date.now;
    this.may = o.mayWrite ?? (() => true);
    this.podsDoneTimeoutMs = o.podsDoneTimeoutMs ?? 5 * 60_000;
    this.retryMs = o.retryMs ?? 2000;
  }

  /** Whether a Job from the watch is worth a key in the queue; the reconcile reads it again anyway. */
  static wants(job: V1Job): boolean {
    return !job.metadata?.deletionTimestamp && jobFinished(job);
  }

  async reconcile(key: string, signal: AbortSignal): Promise<ReconcileResult> {
    const [namespace, name] = splitKey(key);
    const { api, log } = this.o;
    const job = await api.readJob(namespace, name);
    if (!job || !Reconciler.wants(job)) {
      this.refusedSince.delete(key);
      return { kind: 'done' };
    }
    // Recorded: by this harvester, or under a key dropped since (a record it cannot verify any more, but would only overwrite with "not harvested").
    if (deliveryRecordOf(job, this.o.key) || recordedUnderDroppedKey(job, this.o.key)) {
      this.refusedSince.delete(key);
      this.o.reports?.forget(job.metadata?.uid);
      return { kind: 'done' };
    }
    const at = { namespace, job: name };

    const verified = verifyInjection(job, this.o.key);
    // A Job the webhook never saw: no status, so nothing of it verifies, but
    // the webhook's own decision says it would have been injected.
    const missed = verified.ok ? undefined : this.o.missed?.(job);
    let listed: V1Pod[];
    try {
      listed = await api.listPods(namespace, job.metadata?.uid ?? '');
      this.refusedSince.delete(key);
    } catch (err) {
      if (!refused(err)) throw err;
      // A namespace being deleted loses the harvester's log-reader binding
      // first, and its Jobs (this one too) moments later: look again quietly.
      // Still refused after the grace: a failure the queue reports and retries.
      const since = this.refusedSince.get(key) ?? this.now();
      this.refusedSince.set(key, since);
      if (this.now() - since >= REFUSED_GRACE_MS) throw err;
      log('debug', "the Job's pods cannot be listed (its namespace being deleted, or its log-reader binding missing); looking again", { ...at, error: (err as Error).message });
      return { kind: 'requeue', afterMs: this.retryMs };
    }
    const { owned: there, foreign } = ownedPods(job, listed, verified.ok ? { name: verified.value.status.container, digest: verified.value.sidecarDigest } : undefined);
    if (missed?.missed) return this.missed(job, missed, there, foreign, signal);
    // Pods already gone (evicted, deleted) whose ended sidecar the pod watch saw:
    // kept only for a verified Job and only when their sidecar was the signed
    // one (harvester/pod-reports.ts), so they are its own; only their summary is left to check.
    const owned = verified.ok ? [...there, ...(this.o.reports?.gone(job.metadata?.uid, listed) ?? [])] : there;
    const notes: string[] = [];
    if (foreign > 0) notes.push(`${foreign} pod(s) carry the Job's label but are not its own (not controlled by it, or not running the sidecar jobharvest rendered): ignored`);
    // What the pods requested and how long they ran, from the pods listed now (the kept reports of gone ones carry no spec).
    const usage = usageOf(there);
    if (!verified.ok) {
      // Not ours to act on: say so on the Job, touch nothing else.
      log('warn', 'not harvesting a Job whose injection cannot be verified', { ...at, why: verified.why });
      return this.report(job, withUsage({ sink: 'unknown', pods: owned.length, shipped: 0, lost: 0, unaccounted: owned.length, notes: [`not harvested: ${verified.why}`, ...notes] }, usage), signal, true);
    }
    const { status, env } = verified.value;
    const outcomes = owned.map((p) => podOutcome(p, status.container));
    const waiting = owned.some((p) => !podDone(p) && !p.metadata?.deletionTimestamp) || outcomes.some((o) => o.sidecar.kind === 'running');
    const since = finishedAt(job)?.getTime() ?? this.now();
    if (waiting && this.now() - since < this.podsDoneTimeoutMs) return { kind: 'requeue', afterMs: this.retryMs };
    // Pods the Job controller counted as finished that are no longer there: an
    // evicted, preempted or deleted pod goes once it is counted, before the Job
    // finishes, and its termination message and logs go with it.
    const gone = gonePods(job, owned);
    if (gone > 0) notes.push(...(await this.goneNotes(job, owned, gone)));
    const base = withGone(deliveryOf(status.sink, outcomes), gone);
    const work = owned.filter((_p, i) => needsHarvest(outcomes[i]!.sidecar));
    const held = holdOf(job, this.o.key);
    // Reported as they are: a pod without a count says why it has none.
    const asIs = (why: string[] = []): Promise<ReconcileResult> => this.report(job, withUsage(withNotes(base, [...notes, ...unaccountedNotes(owned, outcomes), ...why]), usage), signal);
    if (this.o.maxHoldSeconds <= 0 || (work.length === 0 && !held)) return asIs();

    const endpoint = env[ENV.ENDPOINT.name];
    const destination = matchDestination(this.o.destinations, status.sink, endpoint);
    if (!destination) {
      const why = `the sink ${status.sink} at ${redactUrl(endpoint) ?? '(none)'} is not an approved destination: nothing sent by the harvester`;
      log('warn', 'not harvesting: destination not approved', { ...at, sink: status.sink, endpoint: redactUrl(endpoint) });
      return asIs([why]);
    }

    let hold = held;
    // Without a TTL nothing of the TTL controller's deletes the Job: ship within
    // the same bound, with no hold written (which would give the Job a TTL).
    const placed = held !== undefined || needsHold(job);
    if (!hold && !placed) hold = { originalTtl: null, since: new Date(this.now()).toISOString(), maxHoldSeconds: this.o.maxHoldSeconds };
    if (!hold) {
      // First, before the TTL runs out: the pods (and their logs) stay as long as the Job does.
      const plan = holdPatch(job, this.o.key, since, this.now(), this.o.maxHoldSeconds)!;
      if (signal.aborted || !this.may()) return { kind: 'done' };
      const r = await api.patchJob(namespace, name, plan.patch);
      if (r === 'gone') {
        log('warn', 'the Job was deleted before it could be held; its missing lines are lost', at);
        return { kind: 'done' };
      }
      if (r === 'conflict') return { kind: 'requeue', afterMs: 0 };
      hold = plan.hold;
      log('info', 'holding the Job to ship what its sidecar could not', { ...at, pods: work.length, destination: destination.name, maxHoldSeconds: hold.maxHoldSeconds });
    }

    const delivery = withUsage(withGone(await this.slot(() => this.harvest(job, hold, destination, status.container, owned, outcomes, notes, signal)), gone), usage);
    // Leadership lost mid-harvest: the next leader starts again from the hold; write nothing.
    if (signal.aborted || !this.may()) return { kind: 'done' };
    return this.release(job, placed ? hold : undefined, delivery, signal);
  }

  /**
   * A Job that missed injection: every line of its own pods (controller
   * ownerReference; there is no sidecar to check) is read through pods/log
   * and shipped to the approved destination its settings name, under the
   * hold an injected Job gets, which keeps the user's TTL from deleting it
   * meanwhile and puts that TTL back after. A Job with no TTL gets none.
   */
  private async missed(job: V1Job, m: Extract<MissedCheck, { missed: true }>, owned: readonly V1Pod[], foreign: number, signal: AbortSignal): Promise<ReconcileResult> {
    const { log } = this.o;
    const namespace = job.metadata!.namespace!;
    const name = job.metadata!.name!;
    const at = { namespace, job: name };
    const since = finishedAt(job)?.getTime() ?? this.now();
    const waiting = owned.some((p) => !podDone(p) && !p.metadata?.deletionTimestamp);
    if (waiting && this.now() - since < this.podsDoneTimeoutMs) return { kind: 'requeue', afterMs: this.retryMs };
    const notes: string[] = [];
    if (foreign > 0) notes.push(`${foreign} pod(s) carry the Job's label but are not its own (not controlled by it): ignored`);
    const gone = gonePods(job, owned);
    if (gone > 0) notes.push(`${gone} pod(s) the Job counted as finished were gone before the harvester read them: their lines went with them`);
    const outcomes = owned.map((p) => podOutcome(p, NAMES.container));
    // What the pods requested and how long they ran, as for an injected Job: a missed one costs the same.
    const usage = usageOf(owned);
    const missedRecord = (d: DeliveryRecord): DeliveryRecord => withUsage({ ...withGone(d, gone), injection: 'missed' }, usage);
    const unread = (why: string): Promise<ReconcileResult> =>
      this.report(job, missedRecord(withNotes({ sink: m.sink, pods: owned.length, shipped: 0, lost: 0, unaccounted: owned.length }, [...notes, why])), signal);
    log('warn', 'a Job missed its injection: it ran without the log sidecar', { ...at, pods: owned.length });
    if (this.o.maxHoldSeconds <= 0) return unread('not harvested: the harvester only reports (maximum hold 0)');
    const destination = matchDestination(this.o.destinations, m.sink, m.endpoint);
    if (!destination) {
      log('warn', 'not harvesting: destination not approved', { ...at, sink: m.sink, endpoint: redactUrl(m.endpoint) });
      return unread(`the sink ${m.sink} at ${redactUrl(m.endpoint) ?? '(none)'} is not an approved destination: nothing sent by the harvester`);
    }
    let hold = holdOf(job, this.o.key);
    const placed = hold !== undefined || needsHold(job);
    if (!hold && !placed) hold = { originalTtl: null, since: new Date(this.now()).toISOString(), maxHoldSeconds: this.o.maxHoldSeconds };
    if (!hold) {
      const plan = holdPatch(job, this.o.key, since, this.now(), this.o.maxHoldSeconds)!;
      if (signal.aborted || !this.may()) return { kind: 'done' };
      const r = await this.o.api.patchJob(namespace, name, plan.patch);
      if (r === 'gone') {
        log('warn', 'the Job was deleted before it could be held; its lines are lost', at);
        return { kind: 'done' };
      }
      if (r === 'conflict') return { kind: 'requeue', afterMs: 0 };
      hold = plan.hold;
      log('info', 'holding a Job that missed its injection, to ship its logs', { ...at, pods: owned.length, destination: destination.name, maxHoldSeconds: hold.maxHoldSeconds });
    }
    const delivery = missedRecord(await this.slot(() => this.harvest(job, hold, destination, NAMES.container, owned, outcomes, notes, signal)));
    if (signal.aborted || !this.may()) return { kind: 'done' };
    return this.release(job, placed ? hold : undefined, delivery, signal);
  }

  /**
   * Gone pods leave no status to read, but a pod whose node was lost leaves
   * the node controller's NodeNotReady Event (kept an hour by default). Events
   * name the pod, not its Job: a name of the Job's pattern whose uid is none
   * of the pods still there is taken as one of its gone pods. An Event only
   * changes the wording of a note, never a count, so a forged one gains nothing.
   */
  private async goneNotes(job: V1Job, owned: readonly V1Pod[], gone: number): Promise<string[]> {
    let lost: string[] = [];
    try {
      const events = await this.o.api.listNodeNotReadyEvents(job.metadata!.namespace!);
      lost = nodeLostPodNames(job, owned, events).slice(0, gone);
    } catch (err) {
      this.o.log('warn', 'could not list NodeNotReady Events; gone pods are reported without a cause', { namespace: job.metadata?.namespace, job: job.metadata?.name, error: (err as Error).message });
    }
    const notes = lost.map((name) => `${name}: unaccounted: node lost`);
    const rest = gone - lost.length;
    if (rest > 0) notes.push(`${rest} pod(s) the Job counted as finished are gone (evicted, preempted or deleted): their sidecars' counts went with them, and nothing is left to harvest`);
    return notes;
  }

  private slot<T>(fn: () => Promise<T>): Promise<T> {
    return this.o.harvests ? this.o.harvests.run(fn) : fn();
  }

  private async harvest(job: V1Job, hold: Hold, destination: Destination, sidecar: string, pods: readonly V1Pod[], outcomes: readonly PodOutcome[], notes: readonly string[], signal: AbortSignal): Promise<DeliveryRecord> {
    let shipped = 0;
    let lost = 0;
    let unaccounted = 0;
    let harvested = 0;
    const failed: string[] = [];
    const sink = destination.sink;
    for (let i = 0; i < pods.length; i++) {
      const o = outcomes[i]!.sidecar;
      const message = o.kind === 'reported' ? o.message : undefined;
      shipped += message?.shipped ?? 0;
      // Refused for good by the server: not sent again, lost.
      lost += message?.dead_lettered ?? 0;
      if (!needsHarvest(o)) continue;
      if (signal.aborted) break;
      const pod = pods[i]!;
      const fields = { namespace: job.metadata?.namespace, job: job.metadata?.name, pod: pod.metadata?.name };
      try {
        const r = await this.o.ship({
          pod,
          sidecar,
          message,
          destination,
          kube: this.o.kube,
          limits: this.o.limits,
          deadlineMs: Math.max(1000, holdDeadline(hold) - this.now()),
          signal,
          mayWrite: this.may,
          ...(this.o.identity ? { identity: this.o.identity } : {}),
        });
        shipped += r.shipped;
        harvested += r.shipped;
        lost += r.lost;
        this.o.log(r.lost === 0 ? 'info' : 'warn', 'harvested a pod', { ...fields, ...r });
      } catch (err) {
        // The pod's logs cannot be read (gone, forbidden): nobody knows how many lines it had.
        unaccounted++;
        failed.push(`${pod.metadata?.name ?? '?'}: could not be read (${(err as Error).message.slice(0, 120)})`);
        this.o.log('warn', 'could not harvest a pod; its missing lines are unaccounted', { ...fields, error: (err as Error).message });
      }
    }
    return withNotes(withResumeGaps({ sink, pods: pods.length, shipped, lost, unaccounted, harvested }, outcomes), [...notes, ...failed]);
  }

  /** Writes the delivery record, and with a hold of ours puts the original TTL back in the same write. */
  private async release(job: V1Job, hold: Hold | undefined, delivery: DeliveryRecord, signal: AbortSignal): Promise<ReconcileResult> {
    const { api } = this.o;
    const namespace = job.metadata!.namespace!;
    const name = job.metadata!.name!;
    for (let attempt = 0; attempt < 5; attempt++) {
      // Read again: the harvest may have taken long and the Job changed meanwhile.
      const current = await api.readJob(namespace, name);
      if (!current || current.metadata?.uid !== job.metadata?.uid || deliveryRecordOf(current, this.o.key)) return { kind: 'done' };
      if (signal.aborted || !this.may()) return { kind: 'done' };
      const ours = holdOf(current, this.o.key) ?? hold;
      const patch = ours ? releasePatch(current, this.o.key, ours, delivery, this.link(current)) : recordPatch(current, this.o.key, delivery, this.link(current));
      const r = await api.patchJob(namespace, name, patch);
      if (r === 'gone') return { kind: 'done' };
      if (r === 'conflict') continue;
      await this.event(current, delivery);
      if (ours) this.o.log('info', 'released the Job', { namespace, job: name, ttlSecondsAfterFinished: ours.originalTtl, ...delivery });
      else this.o.log('info', 'delivery reported (the Job has no TTL, so it was not held)', { namespace, job: name, ...delivery });
      return { kind: 'done' };
    }
    return { kind: 'requeue', afterMs: this.retryMs };
  }

  private async report(job: V1Job, delivery: DeliveryRecord, signal: AbortSignal, unverified = false): Promise<ReconcileResult> {
    if (signal.aborted || !this.may()) return { kind: 'done' };
    const namespace = job.metadata!.namespace!;
    const name = job.metadata!.name!;
    const patch = { metadata: { resourceVersion: job.metadata?.resourceVersion, annotations: { ...this.link(job), [DELIVERY_ANNOTATION]: encodeDeliveryRecord(job, this.o.key, delivery) } } };
    const r = await this.o.api.patchJob(namespace, name, patch);
    if (r === 'gone') return { kind: 'done' };
    // Changed meanwhile (maybe reported by another writer): look again.
    if (r === 'conflict') return { kind: 'requeue', afterMs: 0 };
    await this.event(job, delivery, unverified);
    this.o.log('info', 'delivery reported', { namespace, job: name, ...delivery });
    return { kind: 'done' };
  }

  /** The finished Job's link, from the operator's template: its uid and real end time are known now. */
  private link(job: V1Job): Record<string, string> {
    const t = this.o.logsUrlTemplate;
    if (!t) return {};
    const created = job.metadata?.creationTimestamp ? new Date(job.metadata.creationTimestamp).getTime() : undefined;
    const url = renderLogsUrl(t, {
      namespace: job.metadata?.namespace ?? '',
      job: job.metadata?.name,
      uid: job.metadata?.uid,
      from: created,
      to: finishedAt(job)?.getTime(),
    });
    return url ? { [LOGS_URL_ANNOTATION]: url } : {};
  }

  private async event(job: V1Job, delivery: DeliveryRecord, unverified = false): Promise<void> {
    // Counted with the record, which is written once per Job.
    if (delivery.injection === 'missed') this.o.onMissed?.();
    this.o.onRecord?.(job.metadata?.namespace ?? '', delivery, recordResult(delivery, unverified));
    const ev = delivery.injection === 'missed' ? missedEvent(delivery) : deliveryEvent(delivery);
    try {
      await this.o.api.createEvent(job.metadata!.namespace!, jobEvent(job, ev.type, ev.reason, ev.message, this.o.identity ?? EVENT_SOURCE));
    } catch (err) {
      // A namespace being deleted takes no new Events (403, NamespaceTerminating), a deleted one none at all (404): expected, and the Job goes with it.
      const level = namespaceGoing(err) ? 'debug' : 'warn';
      this.o.log(level, 'could not record the delivery Event; the annotation is there', { namespace: job.metadata?.namespace, job: job.metadata?.name, error: (err as Error).message });
    }
  }
}

export function splitKey(key: string): [string, string] {
  const i = key.indexOf('/');
  return [key.slice(0, i), key.slice(i + 1)];
}

/** How many pods the Job's status counts as finished beyond those still there (done or terminating). */
function gonePods(job: V1Job, owned: readonly V1Pod[]): number {
  const counted = (job.status?.succeeded ?? 0) + (job.status?.failed ?? 0);
  const there = owned.filter((p) => podDone(p) || p.metadata?.deletionTimestamp).length;
  return Math.max(0, counted - there);
}

/** The pods' usage, when any pod could be measured; the field is left out otherwise. */
function withUsage(d: DeliveryRecord, usage: DeliveryUsage | undefined): DeliveryRecord {
  return usage ? { ...d, usage } : d;
}

function withGone(d: DeliveryRecord, gone: number): DeliveryRecord {
  return gone > 0 ? { ...d, pods: d.pods + gone, unaccounted: d.unaccounted + gone } : d;
}

/**
 * Notes name pods, and a Job may have thousands: past a few the rest are
 * counted, so the record stays far below the API server's 256 KiB of
 * annotations (a patch over it would fail, and be retried, for ever).
 */
export const MAX_NOTES = 10;

function withNotes(d: DeliveryRecord, notes: readonly string[]): DeliveryRecord {
  if (notes.length === 0) return d;
  const kept = notes.slice(0, MAX_NOTES).map((n) => (n.length > 300 ? `${n.slice(0, 299)}…` : n));
  if (notes.length > MAX_NOTES) kept.push(`and ${notes.length - MAX_NOTES} more`);
  return { ...d, notes: kept };
}

/** Why a pod left no count, as far as its status tells: the node lost above all. */
function unaccountedNotes(pods: readonly V1Pod[], outcomes: readonly PodOutcome[]): string[] {
  const out: string[] = [];
  pods.forEach((p, i) => {
    const o = outcomes[i]!.sidecar;
    if (o.kind === 'reported' && o.message.state !== 'running') return;
    if (o.kind === 'running') return;
    const why = o.kind === 'node-lost' || nodeLost(p) ? 'unaccounted: node lost' : o.kind === 'never-ran' ? 'sidecar never ran' : o.kind === 'silent' ? `sidecar ended without a report (${o.reason ?? `exit ${o.exitCode ?? '?'}`})` : 'sidecar killed after a checkpoint';
    out.push(`${p.metadata?.name ?? '?'}: ${why}`);
  });
  return out;
}

/** A core/v1 Event about a Job, as `kubectl describe job` lists them. */
export function jobEvent(job: V1Job, type: 'Normal' | 'Warning', reason: string, message: string, instance: string): CoreV1Event {
  const now = new Date();
  return {
    metadata: { generateName: `${job.metadata?.name ?? 'job'}.`, namespace: job.metadata?.namespace },
    involvedObject: { apiVersion: 'batch/v1', kind: 'Job', name: job.metadata?.name, namespace: job.metadata?.namespace, uid: job.metadata?.uid },
    type,
    reason,
    message,
    source: { component: EVENT_SOURCE },
    reportingComponent: EVENT_SOURCE,
    reportingInstance: instance,
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
}

/** A Job's pods are named `<job>-<suffix>`, or `<job>-<index>-<suffix>` when indexed. */
function jobPodName(job: V1Job, name: string): boolean {
  const prefix = `${job.metadata?.name ?? ''}-`;
  return name.startsWith(prefix) && /^(\d+-)?[a-z0-9]{5}$/.test(name.slice(prefix.length));
}

/** The gone pods of the Job that NodeNotReady Events name, once each, oldest first. */
export function nodeLostPodNames(job: V1Job, there: readonly V1Pod[], events: readonly CoreV1Event[]): string[] {
  const present = new Set(there.map((p) => p.metadata?.uid));
  const created = job.metadata?.creationTimestamp ? new Date(job.metadata.creationTimestamp).getTime() : 0;
  const seen = new Map<string, { name: string; at: number }>();
  for (const e of events) {
    const o = e.involvedObject;
    if (o.kind !== 'Pod' || e.reason !== 'NodeNotReady' || !o.uid || !o.name || present.has(o.uid) || seen.has(o.uid)) continue;
    if (!jobPodName(job, o.name)) continue;
    const at = new Date(e.lastTimestamp ?? e.eventTime ?? e.firstTimestamp ?? 0).getTime();
    if (at < created) continue;
    seen.set(o.uid, { name: o.name, at });
  }
  return [...seen.values()].sort((a, b) => a.at - b.at).map((x) => x.name);
}
