// PARSE=json: a message that is a JSON object also becomes fields. Bounded so
// that one line cannot make a record of thousands of fields or an arbitrarily
// deep tree (sinks turn fields into labels, columns or attributes). The
// message stays the line as written: nothing is lost, whatever a sink keeps.
import type { FieldValue, Fields } from '../records/record.ts';
import type { JsonSettings } from '../shaping-settings.ts';

type JsonResult = { readonly fields: Fields } | 'plain' | 'too-wide';

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
  const shape = measureTree(value, s.maxFields, s.maxDepth);
  if (shape === 'too-wide') return 'too-wide';
  // Within the depth bound the parsed object is the fields as it is: JSON.parse
  // makes own data properties only, so a "__proto__" key is a field, never a prototype.
  return { fields: (shape === 'deep' ? bound(value as Record<string, unknown>, 1, s.maxDepth) : value) as Fields };
}

/**
 * Counts every key and array element at every level (also under values that
 * will be kept as text: the bound is on what the line holds) and says whether
 * any container sits deeper than maxDepth. No arrays are made: this runs for
 * every JSON line.
 */
function measureTree(root: object, limit: number, maxDepth: number): 'too-wide' | 'deep' | 'ok' {
  let n = 0;
  let deep = false;
  const visit = (x: object, depth: number): boolean => {
    if (Array.isArray(x)) {
      n += x.length;
      if (n > limit) return false;
      for (const c of x as unknown[]) {
        if (c !== null && typeof c === 'object') {
          if (depth + 1 > maxDepth) deep = true;
          if (!visit(c, depth + 1)) return false;
        }
      }
      return true;
    }
    for (const k in x) {
      if (++n > limit) return false;
      const c = (x as Record<string, unknown>)[k];
      if (c !== null && typeof c === 'object') {
        if (depth + 1 > maxDepth) deep = true;
        if (!visit(c, depth + 1)) return false;
      }
    }
    return true;
  };
  if (!visit(root, 1)) return 'too-wide';
  return deep ? 'deep' : 'ok';
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
