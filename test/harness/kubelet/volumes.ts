/**
 * Volumes become local folders, laid out as the kubelet lays them out under its
 * root, and a container's mounts become a table from the path the container
 * was told (its mountPath) to the folder that holds the data.
 *
 * A local process has no mount namespace, so a path inside a mountPath only
 * reaches the data when it is translated: see toLocal(). The kubelet applies
 * it to env values and to arguments (see README.md, "Paths").
 */
import type { V1Container, V1Pod, V1Volume } from '@kubernetes/client-node';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { expand, fieldValue } from './env.ts';

export interface VolumeSources {
  nodeName: string;
  hostIP: string;
  podIP: string;
  secret(namespace: string, name: string): Promise<Record<string, string> | undefined>;
  configMap(namespace: string, name: string): Promise<Record<string, string> | undefined>;
  /** A TokenRequest for the pod's service account, bound to the pod. */
  serviceAccountToken(pod: V1Pod, audience: string | undefined, expirationSeconds: number): Promise<string>;
}

/** The kubelet's "MountVolume.SetUp failed": the pod waits in ContainerCreating and it retries. */
export class VolumeError extends Error {
  override readonly name = 'VolumeError';
}

export interface Mount {
  mountPath: string;
  local: string;
  readOnly: boolean;
}

export function podVolumesDir(root: string, uid: string): string {
  return join(root, 'var/lib/kubelet/pods', uid);
}

function plugin(v: V1Volume): string {
  if (v.emptyDir) return 'kubernetes.io~empty-dir';
  if (v.projected) return 'kubernetes.io~projected';
  if (v.secret) return 'kubernetes.io~secret';
  if (v.configMap) return 'kubernetes.io~configmap';
  if (v.downwardAPI) return 'kubernetes.io~downward-api';
  throw new VolumeError(`volume ${v.name}: unsupported volume type ${Object.keys(v).filter((k) => k !== 'name').join(',')}`);
}

function writeFiles(dir: string, files: Record<string, string>): void {
  for (const [path, content] of Object.entries(files)) {
    const p = join(dir, normalize(path));
    if (!p.startsWith(dir + '/')) throw new VolumeError(`path ${path} escapes its volume`);
    mkdirSync(dirname(p), { recursive: true });
    writeFileSync(p, content);
  }
}

function pick(data: Record<string, string>, items: Array<{ key: string; path: string }> | undefined, what: string): Record<string, string> {
  if (!items) return { ...data };
  const out: Record<string, string> = {};
  for (const it of items) {
    const v = data[it.key];
    if (v === undefined) throw new VolumeError(`${what}: key ${it.key} not found`);
    out[it.path] = v;
  }
  return out;
}

/** Creates every volume of the pod; returns volume name → local folder (or file, for a hostPath file). */
export async function prepareVolumes(pod: V1Pod, root: string, src: VolumeSources): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const ns = pod.metadata!.namespace!;
  const base = join(podVolumesDir(root, pod.metadata!.uid!), 'volumes');
  for (const v of pod.spec?.volumes ?? []) {
    if (v.hostPath) {
      // The node's file system is the kubelet root.
      const local = join(root, normalize(v.hostPath.path));
      const type = v.hostPath.type ?? '';
      if (type === 'DirectoryOrCreate') mkdirSync(local, { recursive: true });
      else if (type === 'Directory' && !existsSync(local)) throw new VolumeError(`hostPath type check failed: ${v.hostPath.path} is not a directory`);
      out.set(v.name, local);
      continue;
    }
    const dir = join(base, plugin(v), v.name);
    mkdirSync(dir, { recursive: true });
    if (v.secret) {
      const data = await src.secret(ns, v.secret.secretName!);
      if (!data && !v.secret.optional) throw new VolumeError(`secret "${v.secret.secretName}" not found`);
      writeFiles(dir, pick(data ?? {}, v.secret.items, `secret ${v.secret.secretName}`));
    } else if (v.configMap) {
      const data = await src.configMap(ns, v.configMap.name!);
      if (!data && !v.configMap.optional) throw new VolumeError(`configmap "${v.configMap.name}" not found`);
      writeFiles(dir, pick(data ?? {}, v.configMap.items, `configmap ${v.configMap.name}`));
    } else if (v.downwardAPI) {
      const files: Record<string, string> = {};
      for (const it of v.downwardAPI.items ?? []) if (it.fieldRef) files[it.path] = fieldValue(pod, it.fieldRef.fieldPath, src);
      writeFiles(dir, files);
    } else if (v.projected) {
      const files: Record<string, string> = {};
      for (const s of v.projected.sources ?? []) {
        if (s.serviceAccountToken) {
          files[s.serviceAccountToken.path] = await src.serviceAccountToken(pod, s.serviceAccountToken.audience, s.serviceAccountToken.expirationSeconds ?? 3600);
        } else if (s.configMap) {
          const data = await src.configMap(ns, s.configMap.name!);
          if (!data && !s.configMap.optional) throw new VolumeError(`configmap "${s.configMap.name}" not found`);
          Object.assign(files, pick(data ?? {}, s.configMap.items, `configmap ${s.configMap.name}`));
        } else if (s.secret) {
          const data = await src.secret(ns, s.secret.name!);
          if (!data && !s.secret.optional) throw new VolumeError(`secret "${s.secret.name}" not found`);
          Object.assign(files, pick(data ?? {}, s.secret.items, `secret ${s.secret.name}`));
        } else if (s.downwardAPI) {
          for (const it of s.downwardAPI.items ?? []) if (it.fieldRef) files[it.path] = fieldValue(pod, it.fieldRef.fieldPath, src);
        }
      }
      writeFiles(dir, files);
    }
    out.set(v.name, dir);
  }
  return out;
}

/** The container's mounts, with subPath and subPathExpr (expanded from the container's env) applied. */
export function containerMounts(c: V1Container, volumes: Map<string, string>, env: Record<string, string>): Mount[] {
  return (c.volumeMounts ?? []).map((m) => {
    const vol = volumes.get(m.name);
    if (vol === undefined) throw new VolumeError(`volumeMount ${m.name}: no such volume`);
    let local = vol;
    const sub = m.subPathExpr !== undefined ? expand(m.subPathExpr, (n) => env[n]) : m.subPath;
    if (sub) {
      local = join(vol, normalize(sub));
      if (!local.startsWith(vol + '/')) throw new VolumeError(`subPath ${sub} escapes volume ${m.name}`);
      // The kubelet creates a missing subPath directory.
      mkdirSync(local, { recursive: true });
    }
    return { mountPath: normalize(m.mountPath).replace(/\/$/, ''), local, readOnly: m.readOnly === true };
  });
}

/**
 * Where a container path lives on this machine: the longest mountPath that
 * contains it decides. Paths outside every mount are returned unchanged.
 */
export function toLocal(mounts: readonly Mount[], path: string): string {
  let best: Mount | undefined;
  for (const m of mounts) {
    if ((path === m.mountPath || path.startsWith(m.mountPath + '/')) && (!best || m.mountPath.length > best.mountPath.length)) best = m;
  }
  return best ? best.local + path.slice(best.mountPath.length) : path;
}
