// `npm run kueue:build`: builds Kueue's controller-manager from the pinned
// module in this folder into the shared cache (seconds when it is there).
import { ensureKueue, kueueVersion } from './binary.ts';

const started = Date.now();
const bin = ensureKueue((msg) => console.log(`[kueue] ${msg}`));
console.log(`[kueue] kueue ${kueueVersion()}: ${bin} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
