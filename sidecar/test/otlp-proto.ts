import protobuf from 'protobufjs';

// The official OTLP logs messages (opentelemetry-proto), field numbers as published.
export const otlpRoot = protobuf.Root.fromJSON({
  nested: {
    otlp: {
      nested: {
        AnyValue: {
          oneofs: { value: { oneof: ['stringValue', 'boolValue', 'intValue', 'doubleValue', 'arrayValue', 'kvlistValue', 'bytesValue'] } },
          fields: {
            stringValue: { type: 'string', id: 1 },
            boolValue: { type: 'bool', id: 2 },
            intValue: { type: 'int64', id: 3 },
            doubleValue: { type: 'double', id: 4 },
            arrayValue: { type: 'ArrayValue', id: 5 },
            kvlistValue: { type: 'KeyValueList', id: 6 },
            bytesValue: { type: 'bytes', id: 7 },
          },
        },
        ArrayValue: { fields: { values: { rule: 'repeated', type: 'AnyValue', id: 1 } } },
        KeyValueList: { fields: { values: { rule: 'repeated', type: 'KeyValue', id: 1 } } },
        KeyValue: { fields: { key: { type: 'string', id: 1 }, value: { type: 'AnyValue', id: 2 } } },
        Resource: { fields: { attributes: { rule: 'repeated', type: 'KeyValue', id: 1 }, droppedAttributesCount: { type: 'uint32', id: 2 } } },
        InstrumentationScope: { fields: { name: { type: 'string', id: 1 }, version: { type: 'string', id: 2 } } },
        LogRecord: {
          fields: {
            timeUnixNano: { type: 'fixed64', id: 1 },
            severityNumber: { type: 'int32', id: 2 },
            severityText: { type: 'string', id: 3 },
            body: { type: 'AnyValue', id: 5 },
            attributes: { rule: 'repeated', type: 'KeyValue', id: 6 },
            droppedAttributesCount: { type: 'uint32', id: 7 },
            observedTimeUnixNano: { type: 'fixed64', id: 11 },
          },
        },
        ScopeLogs: { fields: { scope: { type: 'InstrumentationScope', id: 1 }, logRecords: { rule: 'repeated', type: 'LogRecord', id: 2 } } },
        ResourceLogs: { fields: { resource: { type: 'Resource', id: 1 }, scopeLogs: { rule: 'repeated', type: 'ScopeLogs', id: 2 } } },
        ExportLogsServiceRequest: { fields: { resourceLogs: { rule: 'repeated', type: 'ResourceLogs', id: 1 } } },
        ExportLogsPartialSuccess: { fields: { rejectedLogRecords: { type: 'int64', id: 1 }, errorMessage: { type: 'string', id: 2 } } },
        ExportLogsServiceResponse: { fields: { partialSuccess: { type: 'ExportLogsPartialSuccess', id: 1 } } },
      },
    },
  },
});

/** A decoded record's attribute list (protobufjs toObject, or OTLP/JSON). */
export type KV = Array<{ key: string; value: Record<string, unknown> }>;

/** A decoded AnyValue as plain JSON: maps become objects, arrays arrays, int64 numbers; an empty one null. */
export function anyOf(v: Record<string, unknown> | undefined): unknown {
  if (!v || Object.keys(v).length === 0) return null;
  if ('kvlistValue' in v) return Object.fromEntries(((v.kvlistValue as { values?: KV }).values ?? []).map((e) => [e.key, anyOf(e.value)]));
  if ('arrayValue' in v) return ((v.arrayValue as { values?: Array<Record<string, unknown>> }).values ?? []).map(anyOf);
  if ('intValue' in v) return Number(v.intValue);
  return Object.values(v)[0];
}
