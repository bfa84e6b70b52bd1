import type { CoreV1Api, V1Secret } from '@kubernetes/client-node';
import { planCertificates, type CertMaterial, type CertPolicy, type ForceRotation } from '../tls/plan.ts';
import { messageOf, statusOf } from './errors.ts';
import type { Log } from '../contract/log.ts';
import { retryOnConflict } from './retry.ts';

/** Secret keys. `ca.crt` is the trust bundle, as cert-manager names it; the signer is kept apart. */
const KEYS = { caBundle: 'ca.crt', caCert: 'ca-signer.crt', caKey: 'ca.key', tlsCert: 'tls.crt', tlsKey: 'tls.key' } as const;
const ROTATED_AT = 'jobharvest.io/ca-rotated-at';
/** Set `leaf` or `ca` on the Secret to rotate now; the webhook removes it when done. */
export const ROTATE_ANNOTATION = 'jobharvest.io/rotate';

export function fromSecret(s: V1Secret | undefined): CertMaterial | undefined {
  if (!s?.data) return undefined;
  const d = (k: string) => (s.data?.[k] ? Buffer.from(s.data[k], 'base64').toString('utf8') : '');
  return {
    caBundle: d(KEYS.caBundle),
    caCert: d(KEYS.caCert),
    caKey: d(KEYS.caKey),
    tlsCert: d(KEYS.tlsCert),
    tlsKey: d(KEYS.tlsKey),
    caRotatedAt: s.metadata?.annotations?.[ROTATED_AT],
  };
}

function toData(m: CertMaterial): Record<string, string> {
  const b = (v: string) => Buffer.from(v, 'utf8').toString('base64');
  return {
    [KEYS.caBundle]: b(m.caBundle),
    [KEYS.caCert]: b(m.caCert),
    [KEYS.caKey]: b(m.caKey),
    [KEYS.tlsCert]: b(m.tlsCert),
    [KEYS.tlsKey]: b(m.tlsKey),
  };
}

export interface CertSecretOptions {
  namespace: string;
  name: string;
  policy: CertPolicy;
  /** How often the Secret is re-read (rotations by other replicas, forced rotations, expiry). */
  intervalMs?: number;
  labels?: Record<string, string>;
  onMaterial: (m: CertMaterial) => void;
  log: Log;
  now?: () => Date;
}

/**
 * Keeps the shared certificate Secret of auto mode current. The first replica
 * creates it; one that loses the create race (409) reads the winner's. Updates
 * carry the resourceVersion they were planned from, so two replicas rotating at
 * once cannot both win: the loser re-reads and adopts what the winner wrote.
 */
export class CertSecretManager {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private last: string | undefined;

  constructor(
    private readonly core: CoreV1Api,
    private readonly opts: CertSecretOptions,
  ) {}

  /** Resolves once a usable certificate is known (created, adopted or read). */
  async start(): Promise<CertMaterial> {
    const m = await this.reconcile();
    this.schedule();
    return m;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.reconcile().then(
        () => this.schedule(),
        (err) => {
          this.opts.log('warn', 'certificate reconcile failed; will retry', { error: messageOf(err) });
          this.schedule();
        },
      );
    }, this.opts.intervalMs ?? 30_000);
    this.timer.unref();
  }

  private emit(m: CertMaterial): void {
    const key = m.tlsCert + m.caBundle;
    if (key === this.last) return;
    this.last = key;
    this.opts.onMaterial(m);
  }

  async reconcile(): Promise<CertMaterial> {
    const { namespace, name } = this.opts;
    // 409: another replica created or updated it first. Read again and adopt theirs.
    return retryOnConflict(
      async () => {
        const now = this.opts.now?.() ?? new Date();
        let secret: V1Secret | undefined;
        try {
          secret = await this.core.readNamespacedSecret({ name, namespace });
        } catch (err) {
          if (statusOf(err) !== 404) throw err;
        }
        const force = secret?.metadata?.annotations?.[ROTATE_ANNOTATION] as ForceRotation;
        const plan = await planCertificates(fromSecret(secret), this.opts.policy, now, force === 'leaf' || force === 'ca' ? force : undefined);
        if (!plan.changed && !force) {
          this.emit(plan.material);
          return plan.material;
        }
        const annotations = { ...(secret?.metadata?.annotations ?? {}) };
        delete annotations[ROTATE_ANNOTATION];
        if (plan.material.caRotatedAt) annotations[ROTATED_AT] = plan.material.caRotatedAt;
        const body: V1Secret = {
          apiVersion: 'v1',
          kind: 'Secret',
          type: 'Opaque',
          metadata: {
            name,
            namespace,
            labels: { ...(secret?.metadata?.labels ?? {}), ...(this.opts.labels ?? {}) },
            annotations,
            ...(secret?.metadata?.resourceVersion ? { resourceVersion: secret.metadata.resourceVersion } : {}),
          },
          data: toData(plan.material),
        };
        if (secret) await this.core.replaceNamespacedSecret({ name, namespace, body });
        else await this.core.createNamespacedSecret({ namespace, body });
        this.opts.log('info', 'certificate secret written', { secret: `${namespace}/${name}`, reasons: plan.reasons });
        this.emit(plan.material);
        return plan.material;
      },
      {
        retries: 8,
        baseMs: 50,
        maxMs: 1000,
        onConflict: () => this.opts.log('info', 'certificate secret changed concurrently; re-reading', { secret: `${namespace}/${name}` }),
      },
    );
  }
}
