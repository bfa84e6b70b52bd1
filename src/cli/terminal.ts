/**
 * Text a tenant (or anyone who can write to the log server) wrote, on its way
 * to an operator's terminal. A terminal acts on control characters: OSC 52
 * writes the clipboard, OSC 0/2 sets the window title, CSI moves the cursor
 * and erases what was printed above, and the C1 forms (U+009B is CSI) do the
 * same in one character. kubectl prints these as escapes in `describe` and
 * `get events` since CVE-2021-25743; so does this.
 */

/** C0 controls but tab and newline, DEL, and the C1 controls U+0080–U+009F. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROLS = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;

/**
 * Every control character as a visible escape: a C0 control, ESC or DEL as
 * `\xHH` (ESC is `\x1b`), a C1 control as `\u00HH` (CSI is `\u009b`), so
 * that the one-byte controls and the code points above U+007F read apart.
 * Tab is kept, and newline, which ends a printed line anyway. A backslash is
 * not escaped: the output is for reading; `--raw` and `-o json` give the
 * exact text.
 */
export function escapeControls(s: string): string {
  return s.replace(CONTROLS, (c) => {
    const n = c.charCodeAt(0);
    return n >= 0x80 ? `\\u${n.toString(16).padStart(4, '0')}` : `\\x${n.toString(16).padStart(2, '0')}`;
  });
}

const JSON_UNESCAPED = /[\x7f-\x9f]/g;

/**
 * JSON text with DEL and the C1 controls written as `\u00HH` too:
 * JSON.stringify escapes only U+0000–U+001F, and a UTF-8 terminal acts on
 * U+009B as on ESC [. The value a JSON reader gets is the same.
 */
export function escapeJsonControls(json: string): string {
  return json.replace(JSON_UNESCAPED, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** What a command does with the control characters in the text it prints. */
export type ControlPolicy = 'escape' | 'keep';

/**
 * The decision, pure: escaped on a terminal, kept when the output goes to a
 * file or a pipe (a program reading the lines gets them as they were
 * written), kept on a terminal too with `raw`.
 */
export function controlPolicy(isTerminal: boolean, raw = false): ControlPolicy {
  return isTerminal && !raw ? 'escape' : 'keep';
}

/** The edge: whether a stream is a terminal. A test passes a stream with `isTTY` set. */
export function isTerminal(stream: NodeJS.WritableStream): boolean {
  return (stream as { isTTY?: boolean }).isTTY === true;
}

/** The text as the policy prints it. */
export function applyPolicy(policy: ControlPolicy, s: string): string {
  return policy === 'escape' ? escapeControls(s) : s;
}
