/**
 * What a sink endpoint may look like. The webhook checks it at admission and the
 * sidecar again at start-up; one definition keeps the two from disagreeing about
 * what reaches the pod.
 */

/** URL schemes a sink endpoint may use, as `URL.protocol` spells them. */
export const ENDPOINT_SCHEMES = ['http:', 'https:', 'tcp:', 'tls:'] as const;

export function isEndpointScheme(protocol: string): boolean {
  return (ENDPOINT_SCHEMES as readonly string[]).includes(protocol);
}
