// The engine's front door: what a program that embeds it (the harvester) may
// use. It takes typed options (EngineOptions: identity, mode, the sink and its
// endpoint/TLS/auth/codec, limits, shaping, kube access) and backends
// (checkpoint, dead letter) and an abort signal through the pipeline; nothing
// here reads the env, writes a termination message, serves metrics of a
// pipeline or exits. Those are the sidecar process's (run.ts), which wires the
// same modules itself: this file loads the shaping and api-mode code
// eagerly, which a default sidecar must not.
export { ConfigError, type AuthSettings, type EngineOptions, type Identity, type KubeCredentials, type KubeSettings, type LogLevel, type OtlpEncoding, type TlsSettings } from './config.ts';
export { loadSink, Pipeline, type PipelineOptions, type Summary } from './pipeline.ts';
export { MemoryCheckpoint, type CheckpointBackend, type CheckpointEntry } from './delivery/checkpoint.ts';
export { CountingDeadLetter, type DeadLetterSink } from './delivery/deadletter.ts';
export type { SendResult, Sink } from './delivery/sink.ts';
export { log, withLogFields } from './log.ts';
export { countMissing } from './sources/api/api-source.ts';
export { parseShaping, SHAPING_ENV_NAMES, shapingOn, type ShapingSettings } from './shaping-settings.ts';
export { shapingProblems } from './shape/shaper.ts';
// A program's own /metrics endpoint, served the way the sidecar serves its own.
export { serveMetrics } from './metrics.ts';
