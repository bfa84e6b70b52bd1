import { isObject, type Job } from './kube.ts';

/** An owner kind as the operator names it in the chart: API group (empty for the core group) and kind. */
export interface OwnerKind {
  group: string;
  kind: string;
}

/** The Job's controlling owner, as its ownerReference names it. */
export interface Controller extends OwnerKind {
  name: string;
}

/**
 * Owners that re-create or read their Jobs after they finish, so a TTL that
 * jobharvest adds would make them run a Job again or fail. Only the reason is
 * kept here: the rule is that no controlled Job gets a TTL unless its owner
 * kind is known to be safe (SAFE_TTL_OWNERS or the operator's list).
 */
export const KNOWN_TTL_HAZARDS: Readonly<Record<string, string>> = {
  'jobset.x-k8s.io/JobSet': 'JobSet creates again every child Job that does not exist while the JobSet runs, so a child deleted by a TTL runs again; the JobSet\'s own spec.ttlSecondsAfterFinished deletes its children with it',
  'ray.io/RayJob': 'KubeRay reads the submitter Job while the RayJob runs, and a RayJob whose Job is gone stays Running until its deadline',
  'kubeflow.org/MPIJob': 'the MPI operator reads the launcher Job to set the MPIJob\'s status, and has its own runPolicy.ttlSecondsAfterFinished',
  'trainer.kubeflow.org/TrainJob': 'TrainJob runs its Jobs through a JobSet, whose TTL deletes them',
};

/** The CronJob controller keeps its own history limits and never re-creates a deleted Job. */
const SAFE_TTL_OWNERS: readonly OwnerKind[] = [{ group: 'batch', kind: 'CronJob' }];

const MAX_NAME = 253;

/**
 * The controlling ownerReference, if the Job has one. The reference is the
 * tenant's to write, so it is only ever a reason to do less (no TTL) or what the
 * operator chose (inject by owner kind): a forged one with no real owner behind
 * it gets the Job deleted by the garbage collector, never anything of ours.
 */
export function controllerOf(job: Job): Controller | undefined {
  const refs = job.metadata?.ownerReferences;
  if (!Array.isArray(refs)) return undefined;
  const ref = refs.find((r) => isObject(r) && r.controller === true);
  if (!isObject(ref) || typeof ref.apiVersion !== 'string' || typeof ref.kind !== 'string') return undefined;
  const slash = ref.apiVersion.indexOf('/');
  const group = slash < 0 ? '' : ref.apiVersion.slice(0, slash);
  return { group: group.slice(0, MAX_NAME), kind: ref.kind.slice(0, MAX_NAME), name: typeof ref.name === 'string' ? ref.name.slice(0, MAX_NAME) : '' };
}

/**
 * The CronJob that controls the Job, name and uid, for the OTLP resource
 * (k8s.cronjob.*): the CronJob controller sets the reference when it creates
 * the Job. The tenant could write one too; it only labels their own records.
 */
export function cronJobOf(job: Job): { name: string; uid: string } | undefined {
  const refs = job.metadata?.ownerReferences;
  if (!Array.isArray(refs)) return undefined;
  const ref = refs.find((r) => isObject(r) && r.controller === true);
  if (!isObject(ref) || ref.kind !== 'CronJob' || typeof ref.apiVersion !== 'string' || !ref.apiVersion.startsWith('batch/') || typeof ref.name !== 'string' || ref.name === '') return undefined;
  return { name: ref.name.slice(0, MAX_NAME), uid: typeof ref.uid === 'string' ? ref.uid.slice(0, 64) : '' };
}

export function ownerKindName(k: OwnerKind): string {
  return k.group === '' ? k.kind : `${k.group}/${k.kind}`;
}

function listed(list: readonly OwnerKind[], c: OwnerKind): boolean {
  return list.some((k) => k.group === c.group && k.kind === c.kind);
}

/** `known`: the owner is one whose hazard is known (KNOWN_TTL_HAZARDS), not just any controller. */
export type TtlOwnership = { ttl: 'ours' } | { ttl: 'owner'; owner: string; why: string; known: boolean };

/**
 * Whether jobharvest may give the Job a TTL: only when no controller owns it,
 * or its controller is a CronJob or a kind the operator listed as safe.
 */
export function ttlOwnership(job: Job, safeOwners: readonly OwnerKind[]): TtlOwnership {
  const c = controllerOf(job);
  if (!c || listed(SAFE_TTL_OWNERS, c) || listed(safeOwners, c)) return { ttl: 'ours' };
  const owner = ownerKindName(c);
  const known = KNOWN_TTL_HAZARDS[owner];
  const why = known ?? 'a controller may read or re-create the Jobs it owns after they finish';
  return { ttl: 'owner', owner: `${owner} ${JSON.stringify(c.name)}`, why, known: known !== undefined };
}

/** Whether the operator opted in every Job whose controller is of this kind. */
export function ownerOptedIn(job: Job, kinds: readonly OwnerKind[]): Controller | undefined {
  if (kinds.length === 0) return undefined;
  const c = controllerOf(job);
  return c && listed(kinds, c) ? c : undefined;
}
