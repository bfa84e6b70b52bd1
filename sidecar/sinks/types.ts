// How the registry builds a sink: from the engine's settings and a shared HTTP
// client. What a sink implements (Sink, SendResult) is the delivery stage's
// contract, in delivery/sink.ts.
import type { EngineOptions } from '../config.ts';
import type { Sink } from '../delivery/sink.ts';
import type { HttpClient } from './http/client.ts';

export interface SinkContext {
  readonly config: EngineOptions;
  /** Shared keep-alive HTTP(S) client, created on first use. */
  http(): HttpClient;
}

export type SinkFactory = (ctx: SinkContext) => Sink | Promise<Sink>;

export interface SinkModule {
  readonly createSink: SinkFactory;
}
