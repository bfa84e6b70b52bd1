/**
 * Describe blocks that need the real node (test/node/, test/versions/). The node
 * itself, the control plane and the product on them are in
 * test/support/node-env.ts, which bench/node/ shares.
 */
import { describe, it } from 'vitest';
import { unavailable } from './node-env.ts';

/**
 * A describe block that needs the real node. Where it cannot run (not root,
 * binaries not built) it is skipped with the reason, except under CI=true,
 * where a suite that silently tests nothing would pass: there it fails.
 */
export function describeRealNode(title: string, body: () => void): void {
  if (unavailable !== undefined && process.env.CI === 'true') {
    describe(title, () => {
      it('runs on a real node', () => {
        throw new Error(`CI=true and the real-node suite cannot run here: ${unavailable}`);
      });
    });
    return;
  }
  if (unavailable !== undefined) console.warn(`real-node suite skipped: ${unavailable}`);
  describe.skipIf(unavailable !== undefined)(title, body);
}
