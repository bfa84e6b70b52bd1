// Sink name -> module, loaded on demand so a pod pays only for its own sink
// (the OTLP encoder, for one, is never parsed unless otlp is chosen).
// Adding a sink: write sinks/<name>.ts exporting createSink, add one line here.
import type { SinkType } from '../../src/contract/env.ts';
import type { SinkModule } from './types.ts';

export const SINK_MODULES: Partial<Record<SinkType, () => Promise<SinkModule>>> = {
  http: () => import('./http.ts'),
  loki: () => import('./loki.ts'),
  elasticsearch: () => import('./elasticsearch.ts'),
  otlp: () => import('./otlp.ts'),
  stdout: () => import('./stdout.ts'),
  syslog: () => import('./syslog.ts'),
  forward: () => import('./forward.ts'),
};
