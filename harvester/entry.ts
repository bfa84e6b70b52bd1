// `node harvester.mjs [flags]`: see harvester/main.ts.
import { main } from './main.ts';

await main(process.argv.slice(2));
