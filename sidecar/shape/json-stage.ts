// The JSON detector: whether a message is a JSON object within the bounds,
// and how its record gets its fields. A parsed line is decided on its bytes
// (encode/json-anyvalue.ts's scan) without making it a string: most lines are
// no JSON, and most JSON lines need no JSON.parse. A joined event, a masked
// text or a line the byte path leaves to the object path is parsed.
import { JSON_OK, JSON_PLAIN, JsonScan, objectAhead, scanJson } from '../encode/json-anyvalue.ts';
import type { JsonPreparer } from '../delivery/sink.ts';
import type { CriRecord, Fields, LogRecord } from '../records/record.ts';
import { ShapedRecord, type JsonFields } from '../records/shaped.ts';
import { utf8Valid } from '../records/utf8.ts';
import type { JsonSettings } from '../shaping-settings.ts';
import type { Stats } from '../stats.ts';
import { parseJsonFields } from './json.ts';

/** A message the detector parsed: its fields' say, and the message (the masked fields' JSON when a mask rewrote a field). */
interface ParsedText {
  readonly json: JsonFields;
  readonly message: string;
}

export class JsonStage {
  // The JsonFields its records share: parsed or scanned, with or without the line as written.
  private readonly parsed: JsonFields;
  private readonly parsedExact: JsonFields;
  private readonly scanned: JsonFields;
  private readonly scannedExact: JsonFields;
  /** What the last look at a line's JSON bytes found. */
  private readonly scan = new JsonScan();

  /**
   * `fieldsMask`: the masks a record's fields go through when they are
   * parsed again (see ShapedRecord), on a masker of their own so that nothing
   * is counted twice; none when the masks read the whole text. `preparer`:
   * the sink's encoder, which reads a line in the pass that decides it.
   */
  constructor(
    private readonly settings: JsonSettings,
    private readonly stats: Stats,
    fieldsMask: ((f: Fields) => Fields) | undefined,
    private readonly preparer: JsonPreparer | undefined,
  ) {
    this.parsed = {
      fieldsOf: (message) => {
        const parsed = parseJsonFields(message, settings);
        if (typeof parsed !== 'object') return undefined;
        return fieldsMask ? fieldsMask(parsed.fields) : parsed.fields;
      },
      maxFields: settings.maxFields,
      maxDepth: settings.maxDepth,
      verbatim: !fieldsMask,
      scanned: false,
      keepOriginal: true,
    };
    // Fields that hold the line exactly let it go, unless the operator wants it on every record.
    const always = settings.original === 'always';
    this.parsedExact = { ...this.parsed, keepOriginal: always };
    this.scanned = { ...this.parsed, scanned: true };
    this.scannedExact = { ...this.parsed, scanned: true, keepOriginal: always };
  }

  /**
   * A line decided on its bytes: the line itself when it is no JSON object,
   * its record when it is one; undefined when its bytes cannot tell (invalid
   * UTF-8, or a line the object path reads differently).
   */
  line(first: CriRecord): LogRecord | undefined {
    // Most lines do not even begin like an object: they go on without a look at the rest of their bytes.
    if (!objectAhead(first.src, first.msgAt, first.msgEnd)) return first;
    if (!utf8Valid(first.src, first.msgAt, first.msgEnd)) return undefined;
    const { maxFields, maxDepth } = this.settings;
    const preparer = this.preparer;
    const scan = this.scan;
    const verdict = preparer ? preparer.prepare(scan, first, maxFields, maxDepth) : scanJson(scan, first.src, first.msgAt, first.msgEnd, maxFields, maxDepth);
    if (verdict === JSON_PLAIN) return first;
    if (verdict !== JSON_OK) return undefined;
    this.stats.jsonRecords++;
    const json = scan.exact ? this.scannedExact : this.scanned;
    return new ShapedRecord({ file: first.file, offset: first.offset, stream: first.stream, size: first.size, safe: first.safe, flags: first.flags, json, origin: first, prepared: preparer?.prepared });
  }

  /**
   * A message decided by JSON.parse; undefined when it is no JSON object
   * within the bounds. `fieldsMask`: the masks its fields go through, when
   * the text's masking may not have covered them (operator patterns).
   */
  text(message: string, fieldsMask: ((f: Fields) => Fields) | undefined): ParsedText | undefined {
    const parsed = parseJsonFields(message, this.settings);
    if (typeof parsed !== 'object') {
      if (parsed === 'too-wide') this.stats.jsonTooWide++;
      return undefined;
    }
    this.stats.jsonRecords++;
    // Parsed here to decide and to count what the masks replace; kept as a way to parse again (see ShapedRecord).
    const fields = fieldsMask ? fieldsMask(parsed.fields) : parsed.fields;
    // A value only an operator pattern finds in a field (one anchored to a
    // whole value, `^…$`, which the line's text does not show): the line
    // would carry it past the masks, so the message becomes the masked
    // fields' JSON. Its fields are those fields again.
    if (fields !== parsed.fields) return { json: this.parsed, message: JSON.stringify(fields) };
    // Exact as the byte path would find the same text.
    return { json: this.exactText(message) ? this.parsedExact : this.parsed, message };
  }

  /**
   * Whether a message parsed the slow way is one whose fields hold every
   * value of it exactly: the verdict the byte path gives the same text, so
   * that a line gets the same record whichever way it was parsed.
   */
  private exactText(message: string): boolean {
    if (this.settings.original === 'always') return false;
    const bytes = Buffer.from(message, 'utf8');
    return scanJson(this.scan, bytes, 0, bytes.length, this.settings.maxFields, this.settings.maxDepth) === JSON_OK && this.scan.exact;
  }
}
