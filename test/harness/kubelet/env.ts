/**
 * A container's environment, built from the pod spec the way the kubelet
 * builds it: the `kubernetes` Service variables first, then `envFrom`, then
 * `env` in order, each value expanded against what came before it.
 */
import type { V1Container, V1EnvVar, V1Pod } from '@kubernetes/client-node';

/** What env resolution needs from the API server and the node. */
export interface EnvSources {
  nodeName: string;
  hostIP: string;
  podIP: string;
  /** Data of a Secret or ConfigMap (values already decoded), or undefined when it does not exist. */
  secret(namespace: string, name: string): Promise<Record<string, string> | undefined>;
  configMap(namespace: string, name: string): Promise<Record<string, string> | undefined>;
  /** KUBERNETES_SERVICE_HOST and friends. */
  serviceEnv: Record<string, string>;
}

/** The kubelet's CreateContainerConfigError: the container cannot start until the spec or its references change. */
export class ContainerConfigError extends Error {
  override readonly name = 'ContainerConfigError';
}

/**
 * Kubernetes' $(VAR) expansion (third_party/forked/golang/expansion): `$(NAME)`
 * becomes the value when NAME is known and stays as written otherwise; `$$`
 * escapes a dollar.
 */
export function expand(input: string, lookup: (name: string) => string | undefined): string {
  let out = '';
  for (let i = 0; i < input.length; i++) {
    const c = input[i];
    if (c === '$' && i + 1 < input.length) {
      const next = input[i + 1];
      if (next === '$') {
        out += '$';
        i++;
        continue;
      }
      if (next === '(') {
        const close = input.indexOf(')', i + 2);
        if (close !== -1) {
          const name = input.slice(i + 2, close);
          out += lookup(name) ?? input.slice(i, close + 1);
          i = close;
          continue;
        }
      }
    }
    out += c;
  }
  return out;
}

const SUBSCRIPT = /^(metadata\.(?:labels|annotations))\['(.+)'\]$/;

/** The Downward API's fieldRef paths a container env may use. */
export function fieldValue(pod: V1Pod, path: string, src: Pick<EnvSources, 'nodeName' | 'hostIP' | 'podIP'>): string {
  const sub = SUBSCRIPT.exec(path);
  if (sub) {
    const map = sub[1] === 'metadata.labels' ? pod.metadata?.labels : pod.metadata?.annotations;
    return map?.[sub[2]!] ?? '';
  }
  switch (path) {
    case 'metadata.name':
      return pod.metadata?.name ?? '';
    case 'metadata.namespace':
      return pod.metadata?.namespace ?? '';
    case 'metadata.uid':
      return pod.metadata?.uid ?? '';
    case 'spec.nodeName':
      return pod.spec?.nodeName ?? src.nodeName;
    case 'spec.serviceAccountName':
      return pod.spec?.serviceAccountName ?? '';
    case 'status.hostIP':
    case 'status.hostIPs':
      return src.hostIP;
    case 'status.podIP':
    case 'status.podIPs':
      return src.podIP;
    default:
      throw new ContainerConfigError(`unsupported fieldRef ${path}`);
  }
}

async function resolve(pod: V1Pod, v: V1EnvVar, src: EnvSources): Promise<string | undefined> {
  const ns = pod.metadata!.namespace!;
  const from = v.valueFrom!;
  if (from.fieldRef) return fieldValue(pod, from.fieldRef.fieldPath, src);
  if (from.secretKeyRef) {
    const ref = from.secretKeyRef;
    const data = await src.secret(ns, ref.name!);
    const value = data?.[ref.key];
    if (value === undefined && !ref.optional) {
      throw new ContainerConfigError(data ? `couldn't find key ${ref.key} in Secret ${ns}/${ref.name}` : `secret "${ref.name}" not found`);
    }
    return value;
  }
  if (from.configMapKeyRef) {
    const ref = from.configMapKeyRef;
    const data = await src.configMap(ns, ref.name!);
    const value = data?.[ref.key];
    if (value === undefined && !ref.optional) {
      throw new ContainerConfigError(data ? `couldn't find key ${ref.key} in ConfigMap ${ns}/${ref.name}` : `configmap "${ref.name}" not found`);
    }
    return value;
  }
  // resourceFieldRef would need the node's allocatable resources; no test uses it.
  throw new ContainerConfigError(`env ${v.name}: unsupported valueFrom ${Object.keys(from).join(',')}`);
}

/** The container's env as the runtime would receive it. Throws ContainerConfigError for a bad reference. */
export async function containerEnv(pod: V1Pod, c: V1Container, src: EnvSources): Promise<Record<string, string>> {
  const env: Record<string, string> = { ...src.serviceEnv };
  const ns = pod.metadata!.namespace!;
  for (const ef of c.envFrom ?? []) {
    const prefix = ef.prefix ?? '';
    const ref = ef.configMapRef ?? ef.secretRef;
    if (!ref) continue;
    const data = ef.configMapRef ? await src.configMap(ns, ref.name!) : await src.secret(ns, ref.name!);
    if (!data) {
      if (ref.optional) continue;
      throw new ContainerConfigError(`${ef.configMapRef ? 'configmap' : 'secret'} "${ref.name}" not found`);
    }
    for (const [k, v] of Object.entries(data)) env[prefix + k] = v;
  }
  for (const v of c.env ?? []) {
    if (v.valueFrom) {
      const value = await resolve(pod, v, src);
      if (value !== undefined) env[v.name] = value;
    } else {
      env[v.name] = expand(v.value ?? '', (name) => env[name]);
    }
  }
  return env;
}

/** The variables the kubelet sets for the `kubernetes` Service in every container. */
export function kubernetesServiceEnv(host: string, port: number): Record<string, string> {
  const addr = `tcp://${host}:${port}`;
  return {
    KUBERNETES_SERVICE_HOST: host,
    KUBERNETES_SERVICE_PORT: String(port),
    KUBERNETES_SERVICE_PORT_HTTPS: String(port),
    KUBERNETES_PORT: addr,
    KUBERNETES_PORT_443_TCP: addr,
    KUBERNETES_PORT_443_TCP_PROTO: 'tcp',
    KUBERNETES_PORT_443_TCP_PORT: String(port),
    KUBERNETES_PORT_443_TCP_ADDR: host,
  };
}
