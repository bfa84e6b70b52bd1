import { ERROR_CODES, JobharvestError } from '../../core/errors.ts';

/**
 * Which installed release's configuration `jobharvest logs` reads. Only
 * cluster-scoped state, which only a cluster administrator writes, says where
 * a release is: the MutatingWebhookConfiguration the chart installs names the
 * Service of the webhook (namespace and name), and the chart's ConfigMap has
 * that same name. A ConfigMap anyone could create beside the release (a label
 * is anyone's to set) is never taken for the operator's.
 */

/** The webhook the chart registers, by the name it gives it. */
export const WEBHOOK_NAME = 'jobs.jobharvest.io';
export const HELM_RELEASE_NAME = 'meta.helm.sh/release-name';
export const HELM_RELEASE_NAMESPACE = 'meta.helm.sh/release-namespace';
export const INSTANCE_LABEL = 'app.kubernetes.io/instance';

interface Meta {
  name?: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface WebhookConfigurationLike {
  metadata?: Meta;
  webhooks?: Array<{ name?: string; clientConfig?: { service?: { name?: string; namespace?: string } } }>;
}

export interface ConfigMapLike {
  metadata?: Meta;
  data?: Record<string, string>;
}

/** A release, as its webhook configuration names it. */
export interface Release {
  /** The MutatingWebhookConfiguration's name. */
  configuration: string;
  namespace: string;
  /** The webhook's Service, and the chart's ConfigMap, in `namespace`. */
  service: string;
  /** Who installed it: Helm's release, or (rendered with `helm template`) the instance label; absent if neither. */
  owner?: { kind: 'helm'; release: string; namespace: string } | { kind: 'label'; instance: string };
}

export function releasesOf(items: readonly WebhookConfigurationLike[]): Release[] {
  const out: Release[] = [];
  for (const c of items) {
    const svc = c.webhooks?.find((w) => w.name === WEBHOOK_NAME)?.clientConfig?.service;
    // A URL webhook (`jobharvest webhook --webhook-url`, run by a developer) has no chart configuration.
    if (!svc?.name || !svc.namespace || !c.metadata?.name) continue;
    const a = c.metadata.annotations ?? {};
    const instance = c.metadata.labels?.[INSTANCE_LABEL];
    const owner: Release['owner'] =
      a[HELM_RELEASE_NAME] !== undefined ? { kind: 'helm', release: a[HELM_RELEASE_NAME], namespace: a[HELM_RELEASE_NAMESPACE] ?? svc.namespace } : instance !== undefined ? { kind: 'label', instance } : undefined;
    out.push({ configuration: c.metadata.name, namespace: svc.namespace, service: svc.name, ...(owner ? { owner } : {}) });
  }
  return out.sort((x, y) => (x.namespace + '/' + x.service).localeCompare(y.namespace + '/' + y.service));
}

const label = (r: Release) => `${r.namespace}/${r.service}${r.owner?.kind === 'helm' ? ` (release ${r.owner.release})` : ''}`;

/**
 * The one release to read, narrowed by --chart-namespace and --release;
 * undefined when none is installed (or none matches). More than one left is
 * refused: the command never guesses whose configuration, and so whose
 * credentials and endpoint, to use.
 */
export function chooseRelease(all: readonly Release[], filter: { namespace?: string | undefined; release?: string | undefined }): Release | undefined {
  const matching = all.filter(
    (r) =>
      (filter.namespace === undefined || r.namespace === filter.namespace) &&
      (filter.release === undefined || (r.owner?.kind === 'helm' ? r.owner.release === filter.release : r.owner?.kind === 'label' ? r.owner.instance === filter.release : false) || r.configuration === filter.release),
  );
  if (matching.length > 1) {
    throw new JobharvestError(
      ERROR_CODES.BAD_INPUT,
      `${matching.length} jobharvest releases are installed (${matching.map(label).join(', ')}): name one with --chart-namespace${matching.some((r, i) => matching.findIndex((x) => x.namespace === r.namespace) !== i) ? ' and --release' : ''}`,
    );
  }
  return matching[0];
}

/**
 * Why the ConfigMap is not the release's, or undefined when it is: read by
 * name, it must also carry the release's ownership (Helm's annotations, or
 * the instance label of a `helm template` render) as its webhook configuration does.
 */
export function ownershipProblem(cm: ConfigMapLike, r: Release): string | undefined {
  const a = cm.metadata?.annotations ?? {};
  if (cm.metadata?.name !== r.service || (cm.metadata?.namespace !== undefined && cm.metadata.namespace !== r.namespace)) return `not ${r.namespace}/${r.service}`;
  if (r.owner?.kind === 'helm') {
    if (a[HELM_RELEASE_NAME] !== r.owner.release || a[HELM_RELEASE_NAMESPACE] !== r.owner.namespace) {
      return `its ${HELM_RELEASE_NAME}/${HELM_RELEASE_NAMESPACE} annotations are not those of release ${r.owner.namespace}/${r.owner.release}`;
    }
    return undefined;
  }
  if (r.owner?.kind === 'label') {
    return cm.metadata?.labels?.[INSTANCE_LABEL] === r.owner.instance ? undefined : `its ${INSTANCE_LABEL} label is not ${r.owner.instance}`;
  }
  return `the webhook configuration ${r.configuration} names no release (no ${HELM_RELEASE_NAME} annotation, no ${INSTANCE_LABEL} label)`;
}
