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

// Query parameter names that carry credentials: token, access_token, api_key,
// apikey, secret, password, passwd, pwd, signature, sig, X-Amz-Credential, auth…
const CREDENTIAL_PARAM = /token|key|secret|passw|pwd|signature|credential|^sig$|^auth/i;

/**
 * The first query parameter of the endpoint whose name says it carries a
 * credential. Such an endpoint would put the secret in plain pod env, readable
 * by anyone who can get the Job; credentials belong in a Secret.
 */
export function credentialQueryParameter(u: URL): string | undefined {
  for (const name of u.searchParams.keys()) if (CREDENTIAL_PARAM.test(name)) return name;
  return undefined;
}
