// bench:burst's reference webhooks, in one process: the same Fastify app, TLS
// settings and Node runtime as jobharvest (src/http/app.ts, bundled, plain
// node). The bench registers each exactly as jobharvest registers itself.
//   POST /allow   the no-op: allowed: true, the Job unchanged, nothing read
//                 but the uid.
//   POST /static  allowed: true with a fixed patch: jobharvest's patch for the
//                 first Job it sees (computed once by the core, with the
//                 namespace annotations in NAMESPACE_ANNOTATIONS), then the
//                 same patch for every Job. The bench's Jobs are all alike,
//                 so each is stored as jobharvest would store it: the
//                 difference to the no-op is what the mutation itself costs
//                 the API server, etcd and the client; the difference to
//                 jobharvest is jobharvest's own work per review.
//
// Prints one JSON line on stdout, {"port":…,"ca":"<PEM>"}, then serves until
// SIGTERM. GET /calls answers how many reviews each route has answered, so
// the bench can tell when the API server has started or stopped calling it.
import { build } from '../../src/http/app.ts';
import { defaultConfig } from '../../src/core/config.ts';
import { review, parseReview } from '../../src/core/admission.ts';
import { generateBundle } from '../../src/tls/generate.ts';

const bundle = await generateBundle({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
const config = defaultConfig();
const annotations = JSON.parse(process.env.NAMESPACE_ANNOTATIONS ?? '{}') as Record<string, string>;
const app = build({
  tls: bundle.serving,
  baselineRoute: true,
  deps: { config, namespace: () => undefined, serverVersion: () => undefined },
});
const calls = { allow: 0, static: 0 };
app.addHook('onResponse', async (req) => {
  // The API server adds ?timeout=… to the webhook's URL.
  if (req.routeOptions.url === '/allow') calls.allow++;
});
let fixed: { patchType: 'JSONPatch'; patch: string } | undefined;
app.post('/static', async (req, reply) => {
  calls.static++;
  const request = parseReview(req.body);
  if (!fixed) {
    const r = await review(request, { config, namespace: (name) => ({ name, annotations }), serverVersion: () => undefined });
    const { patch, patchType } = r.review.response;
    if (!patch || !patchType) throw new Error(`the first Job was not patched: ${JSON.stringify(r.disposition)}`);
    fixed = { patchType, patch };
  }
  return reply.send({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: request.uid, allowed: true, ...fixed } });
});
app.get('/calls', async () => calls);
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) });
process.stdout.write(`${JSON.stringify({ port: (app.server.address() as { port: number }).port, ca: bundle.ca.cert })}\n`);
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
