//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` and
//! `tracestate` values, parsed from hostile input and formatted for the wire.
//!
//! # Contract
//! - [`TraceParent::parse`] accepts version `00` exactly (`00-{32 hex}-{16 hex}-{2 hex}`,
//!   55 bytes, lowercase hex) and a later version the way the spec asks: its first 55
//!   bytes read as version `00`, followed by the end or a `-`. Everything else is `None`:
//!   version `ff`, uppercase hex, wrong lengths or separators, an all-zero trace id or
//!   parent id, and any value longer than [`TRACEPARENT_MAX`] bytes, which is not read.
//! - Flags keep the two bits the spec defines (`sampled`, `random`); the reserved bits are
//!   set to zero, as the spec asks of whoever passes the value on.
//! - [`TraceState::parse`] keeps a `tracestate` of at most [`TRACESTATE_MAX`] bytes of
//!   printable ASCII, unchanged; a longer or unprintable one is dropped whole, not cut,
//!   because a cut list member would be a different member. Its list syntax is the
//!   vendors' business and is not checked.
//! - Formatting always writes version `00`, lowercase.

use std::fmt;

/// The longest `traceparent` value read. A version-00 value is 55 bytes; a later version
/// may append fields, but nothing legitimate comes near this.
pub const TRACEPARENT_MAX: usize = 256;

/// The longest `tracestate` value carried on. The spec asks vendors to propagate at least
/// 512 characters of it; a longer one is dropped.
pub const TRACESTATE_MAX: usize = 512;

/// Bytes of a version-00 `traceparent`.
const VERSION_00_LEN: usize = 55;

/// The flag bits the spec defines: `sampled` (1) and `random` (2).
const KNOWN_FLAGS: u8 = 0b11;

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// An id of `$len` bytes that is never all zero, shown as lowercase hex.
macro_rules! nonzero_id {
    ($(#[$doc:meta])* $name:ident, $len:literal, $int:ty) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name([u8; $len]);

        impl $name {
            /// The id of these bytes, unless they are all zero (the spec's invalid id).
            pub fn from_bytes(bytes: [u8; $len]) -> Option<Self> {
                (bytes != [0; $len]).then_some(Self(bytes))
            }

            /// The id's bytes, most significant first.
            pub fn to_bytes(self) -> [u8; $len] {
                self.0
            }

            /// A fresh random id from the thread's generator, drawn as one integer
            /// (an array would be drawn byte by byte).
            pub fn random() -> Self {
                loop {
                    if let Some(id) = Self::from_bytes(rand::random::<$int>().to_be_bytes()) {
                        return id;
                    }
                }
            }
        }

        impl fmt::Display for $name {
            /// One write of the whole id: ids are formatted on every publish.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut hex = [0; 2 * $len];
                for (pair, byte) in hex.chunks_exact_mut(2).zip(self.0) {
                    pair[0] = HEX_DIGITS[usize::from(byte >> 4)];
                    pair[1] = HEX_DIGITS[usize::from(byte & 0xf)];
                }
                f.write_str(std::str::from_utf8(&hex).expect("hex digits are ASCII"))
            }
        }
    };
}

nonzero_id!(
    /// A trace's id: 16 bytes, never all zero.
    TraceId,
    16,
    u128
);

nonzero_id!(
    /// A span's id: 8 bytes, never all zero.
    SpanId,
    8,
    u64
);

/// A `traceparent`: the trace, the span of the caller, and the trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace this message belongs to.
    pub trace_id: TraceId,
    /// The span that sent it: the parent of the span that handles it.
    pub parent_id: SpanId,
    /// The trace flags (bit 0 `sampled`, bit 1 `random`).
    pub flags: u8,
}

impl TraceParent {
    /// The `sampled` flag: the caller may have recorded its span.
    pub const SAMPLED: u8 = 0b01;

    /// Parse a `traceparent` value as received; `None` for anything the spec calls
    /// invalid (see the module doc).
    pub fn parse(value: &[u8]) -> Option<Self> {
        if value.len() < VERSION_00_LEN || value.len() > TRACEPARENT_MAX {
            return None;
        }
        let version = hex_byte(&value[0..2])?;
        let fields_end = match version {
            0xff => return None,
            0x00 if value.len() != VERSION_00_LEN => return None,
            _ if value.len() > VERSION_00_LEN && value[VERSION_00_LEN] != b'-' => return None,
            _ => VERSION_00_LEN,
        };
        let value = &value[..fields_end];
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        Some(Self {
            trace_id: TraceId::from_bytes(hex_array(&value[3..35])?)?,
            parent_id: SpanId::from_bytes(hex_array(&value[36..52])?)?,
            flags: hex_byte(&value[53..55])? & KNOWN_FLAGS,
        })
    }

    /// Whether the caller set the `sampled` flag.
    pub fn sampled(&self) -> bool {
        self.flags & Self::SAMPLED != 0
    }
}

impl fmt::Display for TraceParent {
    /// The version-00 wire form, `00-{trace_id}-{parent_id}-{flags}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id, self.parent_id, self.flags
        )
    }
}

/// A `tracestate` value that is safe to pass on: bounded and printable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceState(Box<str>);

impl TraceState {
    /// Keep `value` if it is at most [`TRACESTATE_MAX`] bytes of printable ASCII and not
    /// blank; `None` drops it.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let printable = value.iter().all(|byte| (b' '..=b'~').contains(byte));
        let blank = value.iter().all(|byte| *byte == b' ');
        if value.len() > TRACESTATE_MAX || !printable || blank {
            return None;
        }
        let value = std::str::from_utf8(value).ok()?;
        Some(Self(value.into()))
    }

    /// The value as it goes on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a message carries of its trace: a `traceparent`, and a `tracestate` that rides
/// along with it (never without it: the spec drops a state whose parent is invalid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The `traceparent` header.
    pub parent: TraceParent,
    /// The `tracestate` header, when the sender set a valid one.
    pub state: Option<TraceState>,
}

impl TraceContext {
    /// The context of a message whose headers carry `traceparent` and perhaps
    /// `tracestate`, as raw bytes; `None` when the `traceparent` is invalid, whatever
    /// the state says.
    pub fn from_headers(traceparent: &[u8], tracestate: Option<&[u8]>) -> Option<Self> {
        let parent = TraceParent::parse(traceparent)?;
        Some(Self {
            parent,
            state: tracestate.and_then(TraceState::parse),
        })
    }

    /// A new trace, started by a producer: a random trace id and a random id for the
    /// producer's (unrecorded) span, sampled.
    pub fn start() -> Self {
        Self {
            parent: TraceParent {
                trace_id: TraceId::random(),
                parent_id: SpanId::random(),
                flags: TraceParent::SAMPLED,
            },
            state: None,
        }
    }
}

fn hex_digit(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    Some(hex_digit(pair[0])? << 4 | hex_digit(pair[1])?)
}

fn hex_array<const N: usize>(hex: &[u8]) -> Option<[u8; N]> {
    let mut bytes = [0; N];
    for (byte, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
        *byte = hex_byte(pair)?;
    }
    Some(bytes)
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
