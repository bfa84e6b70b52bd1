// PARSE=json: a message that is a JSON object also becomes fields. Bounded so
// that one line cannot make a record of thousands of fields or an arbitrarily
// deep tree (sinks turn fields into labels, columns or attributes). The
// message stays the line as written: nothing is lost, whatever a sink keeps.
import type { FieldValue, Fields } from '../records/record.ts';
import type { JsonSettings } from './settings.ts';

export type JsonResult = { readonly fields: Fields } | 'plain' | 'too-wide';

export function parseJsonFields(message: string, s: JsonSettings): JsonResult {
  let i = 0;
  while (i < message.length && (message.charCodeAt(i) === 32 || message.charCodeAt(i) === 9)) i++;
  if (message.charCodeAt(i) !== 123 /* { */) return 'plain';
  let value: unknown;
  try {
    value = JSON.parse(message);
  } catch {
    // Not JSON after all, or nested past the engine's stack: a plain line.
    return 'plain';
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return 'plain';
  // Every key and array element at every level counts, also under values kept as text: the bound is on what the line holds.
  if (countNodes(value, s.maxFields) > s.maxFields) return 'too-wide';
  return { fields: bound(value as Record<string, unknown>, 1, s.maxDepth) as Fields };
}

function countNodes(v: unknown, limit: number): number {
  let n = 0;
  const stack: unknown[] = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    if (x === null || typeof x !== 'object') continue;
    const children = Array.isArray(x) ? x : Object.values(x);
    n += children.length;
    if (n > limit) return n;
    for (const c of children) stack.push(c);
  }
  return n;
}

/** Values at `depth` (the object's own fields are at 1); containers whose children would be deeper than maxDepth stay JSON text. */
function bound(obj: Record<string, unknown> | unknown[], depth: number, maxDepth: number): FieldValue {
  const child = (v: unknown): FieldValue => {
    if (v === null || typeof v !== 'object') return v as FieldValue;
    if (depth + 1 > maxDepth) return JSON.stringify(v);
    return bound(v as Record<string, unknown>, depth + 1, maxDepth);
  };
  if (Array.isArray(obj)) return obj.map(child);
  // fromEntries defines own properties, so a "__proto__" key stays a field and never a prototype.
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, child(v)]));
}
