import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../harness/kubelet/images.ts';

/** `require` and `replace` versions of the k8s.io modules in a go.mod. */
function k8sPins(goMod: string): Map<string, string> {
  const pins = new Map<string, string>();
  for (const line of readFileSync(join(REPO, goMod), 'utf8').split('\n')) {
    const replaced = /^\s*(k8s\.io\/[\w.-]+)\s+=>\s+\S+\s+(v\S+)/.exec(line);
    if (replaced) {
      pins.set(`replace ${replaced[1]}`, replaced[2]!);
      continue;
    }
    const required = /^\s*(k8s\.io\/kubernetes)\s+(v\S+)/.exec(line);
    if (required) pins.set(required[1]!, required[2]!);
  }
  return pins;
}

describe('the node module pins', () => {
  // The kubelet must be the same release as the API server it registers with,
  // and both are pinned in separate modules (test/harness/node/build.sh says why).
  it('pins k8s.io/kubernetes and every staging replace exactly as the control plane does', () => {
    const cluster = k8sPins('test/harness/cluster/go.mod');
    const node = k8sPins('test/harness/node/kube/go.mod');
    expect(cluster.get('k8s.io/kubernetes')).toMatch(/^v1\./);
    expect(cluster.size).toBeGreaterThan(30);
    expect(Object.fromEntries(node)).toEqual(Object.fromEntries(cluster));
  });
});
