import type { AdmissionregistrationV1Api } from '@kubernetes/client-node';
import { issuedByAny } from '../tls/inspect.ts';
import { messageOf } from './errors.ts';
import type { Log } from '../contract/log.ts';
import { retryOnConflict } from './retry.ts';

export interface CaBundleOptions {
  webhookConfigName: string;
  /** false: only check (cert-manager and provided modes, where somebody else writes the caBundle). */
  write: boolean;
  intervalMs?: number;
  log: Log;
  /** Called after every check with whether the live caBundle matches. */
  onStatus?: (matches: boolean) => void;
}

/**
 * Puts our CA bundle on every webhook entry of our MutatingWebhookConfiguration
 * (by name), only when it differs, retrying conflicts with backoff, and checks
 * again periodically because `helm upgrade` may reset it to the chart's value.
 */
export class CaBundleReconciler {
  private bundle: string | undefined;
  private leaf: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private running: Promise<void> = Promise.resolve();
  private matches = false;

  constructor(
    private readonly api: AdmissionregistrationV1Api,
    private readonly opts: CaBundleOptions,
  ) {}

  /** True when the live configuration carries the bundle last set. */
  inSync(): boolean {
    return this.matches;
  }

  /** The bundle to publish (write mode) and the serving leaf it must trust. */
  setMaterial(bundle: string | undefined, leaf: string): Promise<void> {
    this.bundle = bundle;
    this.leaf = leaf;
    return this.kick();
  }

  start(): void {
    const tick = () => {
      if (this.stopped) return;
      this.timer = setTimeout(() => void this.kick().finally(tick), this.opts.intervalMs ?? 30_000);
      this.timer.unref();
    };
    tick();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }

  /** Serialises reconciles so a periodic check and a new bundle never race each other. */
  kick(): Promise<void> {
    this.running = this.running.then(() =>
      this.reconcile().catch((err) => {
        this.setMatches(false);
        this.opts.log('warn', 'caBundle reconcile failed; will retry', { error: messageOf(err) });
      }),
    );
    return this.running;
  }

  private setMatches(v: boolean): void {
    this.matches = v;
    this.opts.onStatus?.(v);
  }

  private trusts(b64: string | undefined): boolean {
    if (!b64 || !this.leaf) return false;
    try {
      return issuedByAny(this.leaf, Buffer.from(b64, 'base64').toString('utf8'));
    } catch {
      return false;
    }
  }

  private async reconcile(): Promise<void> {
    if (!this.leaf) return;
    const want = this.bundle;
    const wantB64 = want ? Buffer.from(want, 'utf8').toString('base64') : undefined;
    const name = this.opts.webhookConfigName;
    await retryOnConflict(
      async () => {
        const cfg = await this.api.readMutatingWebhookConfiguration({ name });
        const hooks = cfg.webhooks ?? [];
        if (!this.opts.write || !wantB64) {
          this.setMatches(hooks.length > 0 && hooks.every((h) => this.trusts(h.clientConfig?.caBundle)));
          return;
        }
        const stale = hooks.filter((h) => h.clientConfig?.caBundle !== wantB64);
        if (stale.length === 0) {
          this.setMatches(hooks.length > 0);
          return;
        }
        this.setMatches(false);
        for (const h of hooks) h.clientConfig = { ...(h.clientConfig ?? {}), caBundle: wantB64 };
        // replace carries the resourceVersion just read: a concurrent writer makes it 409.
        await this.api.replaceMutatingWebhookConfiguration({ name, body: cfg });
        this.opts.log('info', 'caBundle updated', { webhookConfiguration: name, entries: stale.map((h) => h.name) });
        this.setMatches(true);
      },
      { retries: 10, baseMs: 100, maxMs: 5000 },
    );
  }
}
