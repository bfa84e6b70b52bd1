import { CoreV1Api, makeInformer, type KubeConfig, type V1LimitRange, type V1ResourceQuota } from '@kubernetes/client-node';
import type { LimitRangeItem, NamespaceMeta } from '../core/kube.ts';
import type { Log } from '../contract/log.ts';

/**
 * What a namespace's ResourceQuotas and LimitRanges ask of every container,
 * so the webhook renders a sidecar the quota and LimitRanger plugins admit
 * (a CPU limit under a limits.cpu quota) and warns at admission where they
 * would not, instead of leaving a FailedCreate Event to find. Only the few
 * fields that matter are kept: at most a handful of strings per namespace.
 */
export interface NamespacePolicy {
  /** Merges what is known of the namespace's policy into its metadata. */
  with(meta: NamespaceMeta): NamespaceMeta;
  synced(): boolean;
  stop(): Promise<void>;
}

const QUOTA_KEYS = new Set(['cpu', 'memory', 'requests.cpu', 'requests.memory', 'limits.cpu', 'limits.memory']);
const RESOURCES = ['cpu', 'memory'];
/** Far more than a namespace has; what is past it is not read. */
const MAX_ITEMS = 16;

function pick(l: Record<string, string> | undefined): Record<string, string> | undefined {
  if (!l) return undefined;
  const out: Record<string, string> = {};
  for (const r of RESOURCES) if (typeof l[r] === 'string') out[r] = String(l[r]).slice(0, 64);
  return Object.keys(out).length ? out : undefined;
}

export function quotaKeysOf(quotas: readonly V1ResourceQuota[]): string[] {
  const keys = new Set<string>();
  for (const q of quotas) for (const k of Object.keys(q.spec?.hard ?? {})) if (QUOTA_KEYS.has(k)) keys.add(k);
  return [...keys].sort();
}

export function limitItemsOf(ranges: readonly V1LimitRange[]): LimitRangeItem[] {
  const items: LimitRangeItem[] = [];
  for (const lr of ranges) {
    for (const it of lr.spec?.limits ?? []) {
      if (it.type !== 'Container' || items.length >= MAX_ITEMS) continue;
      const item: LimitRangeItem = { name: String(lr.metadata?.name ?? '').slice(0, 253) };
      for (const f of ['min', 'max', 'maxLimitRequestRatio', 'default', 'defaultRequest'] as const) {
        // client-node names the `default` field _default.
        const v = pick((f === 'default' ? it._default : it[f]) as Record<string, string> | undefined);
        if (v) item[f] = v;
      }
      if (Object.keys(item).length > 1) items.push(item);
    }
  }
  return items;
}

export async function startNamespacePolicy(kc: KubeConfig, log: Log): Promise<NamespacePolicy> {
  const api = kc.makeApiClient(CoreV1Api);
  const quotas = makeInformer<V1ResourceQuota>(kc, '/api/v1/resourcequotas', () => api.listResourceQuotaForAllNamespaces());
  const ranges = makeInformer<V1LimitRange>(kc, '/api/v1/limitranges', () => api.listLimitRangeForAllNamespaces());
  let stopped = false;
  const state = { quotas: false, ranges: false };
  const keep = (name: 'quotas' | 'ranges', informer: typeof quotas | typeof ranges): Promise<void> => {
    const what = name === 'quotas' ? 'ResourceQuota' : 'LimitRange';
    const start = (): Promise<void> =>
      informer.start().then(
        () => void (state[name] = true),
        (err: unknown) => retry(err),
      );
    const retry = (err: unknown) => {
      state[name] = false;
      if (stopped) return;
      // Until it lists, the sidecar is rendered without the namespace's policy: admission never waits for it.
      log('warn', `${what} watch failed; re-listing`, { error: String((err as Error)?.message ?? err) });
      setTimeout(() => void (stopped || start()), 5000).unref();
    };
    informer.on('error', retry);
    return start();
  };
  await Promise.all([keep('quotas', quotas), keep('ranges', ranges)]);
  return {
    with(meta) {
      const q = quotaKeysOf(quotas.list(meta.name));
      const l = limitItemsOf(ranges.list(meta.name));
      if (q.length === 0 && l.length === 0) return meta;
      return { ...meta, ...(q.length ? { quotaKeys: q } : {}), ...(l.length ? { limitRanges: l } : {}) };
    },
    synced: () => state.quotas && state.ranges,
    async stop() {
      stopped = true;
      await Promise.all([quotas.stop(), ranges.stop()]);
    },
  };
}
