// Untrusted text (a server's body, a Location, a URL) as reasons quote it: bounded, one
// line, with the characters that break, forge or disguise a line escaped as Rust escapes
// them (`\n`, `\u{1b}`, `\u{202e}`), so that a reason reads the same from either SDK. The
// rule is the Rust SDK's `text` module's (sdk/src/text.rs); the host's logs use it too.

/** Whether the code point `c` is shown escaped (sdk/src/text.rs `is_escaped`). */
export function isEscaped(c) {
  return (
    isControl(c) ||
    c === 0x061c ||
    c === 0x200b ||
    c === 0x200e ||
    c === 0x200f ||
    (c >= 0x2028 && c <= 0x202e) ||
    (c >= 0x2060 && c <= 0x2064) ||
    (c >= 0x2066 && c <= 0x206f) ||
    c === 0xfeff ||
    (c >= 0xfff9 && c <= 0xfffb) ||
    (c >= 0xe0000 && c <= 0xe007f)
  );
}

/** Unicode's `Cc`, as Rust's `char::is_control`. */
function isControl(c) {
  return c <= 0x1f || (c >= 0x7f && c <= 0x9f);
}

const SHORT = { 0x09: "\\t", 0x0a: "\\n", 0x0d: "\\r", 0x00: "\\0" };

/** `text` with every escaped character replaced by its escape. */
export function escape(text) {
  let out = "";
  for (const ch of text) {
    const c = ch.codePointAt(0);
    if (!isEscaped(c)) out += ch;
    else out += (isControl(c) && SHORT[c]) || `\\u{${c.toString(16)}}`;
  }
  return out;
}

/**
 * The first `max` bytes of `bytes` as one line: read lossily as UTF-8, escaped, `…` where
 * it was cut (the Rust SDK's `bounded`).
 * @param {Uint8Array} bytes
 */
export function bounded(bytes, max) {
  const cut = bytes.length > max;
  const text = new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes.subarray(0, Math.min(bytes.length, max)));
  return escape(text) + (cut ? "…" : "");
}

/** A string's UTF-8 bytes. */
export function utf8(text) {
  return new TextEncoder().encode(text);
}
