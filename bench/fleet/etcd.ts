// What the objects cost in etcd: the stored values (the API server's protobuf
// encoding) under a key prefix, read through etcd's JSON gateway.

const b64 = (s: string) => Buffer.from(s).toString('base64');

/** The end of the key range of every key starting with `prefix`. */
export function prefixEnd(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

export interface StoredSize {
  objects: number;
  bytes: number;
}

/** The values under `prefix`, at most `limit` of them (a sample, for the mean). */
export async function storedSize(etcdUrl: string, prefix: string, limit = 2000): Promise<StoredSize> {
  const res = await fetch(`${etcdUrl}/v3/kv/range`, { method: 'POST', body: JSON.stringify({ key: b64(prefix), range_end: b64(prefixEnd(prefix)), limit }) });
  if (!res.ok) throw new Error(`etcd range ${prefix}: HTTP ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { kvs?: Array<{ value?: string }> };
  let bytes = 0;
  for (const kv of body.kvs ?? []) bytes += Buffer.from(kv.value ?? '', 'base64').length;
  return { objects: body.kvs?.length ?? 0, bytes };
}

export function addSizes(a: StoredSize, b: StoredSize): StoredSize {
  return { objects: a.objects + b.objects, bytes: a.bytes + b.bytes };
}
