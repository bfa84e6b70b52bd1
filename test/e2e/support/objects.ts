/**
 * Comparison of what the API server stored with what a golden file says. The
 * server adds defaults (terminationMessagePath, dnsPolicy, selectors, labels…)
 * and sets name, uid and timestamps; everything the golden file states must be
 * there, unchanged, and no array may have gained or lost an element.
 */
export function containedIn(expected: unknown, actual: unknown, path = ''): string[] {
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return [`${path}: expected an array, got ${JSON.stringify(actual)?.slice(0, 80)}`];
    if (expected.length !== actual.length) return [`${path}: expected ${expected.length} elements, got ${actual.length}`];
    return expected.flatMap((e, i) => containedIn(e, actual[i], `${path}[${i}]`));
  }
  if (expected !== null && typeof expected === 'object') {
    if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return [`${path}: expected an object, got ${JSON.stringify(actual)?.slice(0, 80)}`];
    return Object.entries(expected).flatMap(([k, v]) => containedIn(v, (actual as Record<string, unknown>)[k], `${path}.${k}`));
  }
  if (expected === actual) return [];
  // Quantities and integers may come back in canonical form.
  if (String(expected) === String(actual)) return [];
  return [`${path}: expected ${JSON.stringify(expected)?.slice(0, 80)}, got ${JSON.stringify(actual)?.slice(0, 80)}`];
}
