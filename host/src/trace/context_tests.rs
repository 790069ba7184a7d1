//! The spec's examples, and what a hostile sender may put in the headers.

use super::*;

const SPEC_EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn parse(value: &str) -> Option<TraceParent> {
    TraceParent::parse(value.as_bytes())
}

#[test]
fn the_specs_example_parses_into_its_ids_and_the_sampled_flag() {
    let parent = parse(SPEC_EXAMPLE).expect("the spec's example is valid");
    assert_eq!(
        parent.trace_id.to_string(),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(parent.parent_id.to_string(), "00f067aa0ba902b7");
    assert!(parent.sampled());
    assert_eq!(parent.to_string(), SPEC_EXAMPLE, "formatting round-trips");
}

#[test]
fn an_unsampled_traceparent_is_valid_and_keeps_its_flags() {
    let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    let parent = parse(value).expect("valid");
    assert!(!parent.sampled());
    assert_eq!(parent.to_string(), value);
}

#[test]
fn reserved_flag_bits_are_cleared_and_the_random_flag_kept() {
    let parent = parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff").expect("valid");
    assert_eq!(parent.flags, 0b11);
    assert!(parent.to_string().ends_with("-03"), "{parent}");
}

#[test]
fn all_zero_ids_are_invalid() {
    assert_eq!(
        parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        None
    );
    assert_eq!(
        parse("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
        None
    );
}

#[test]
fn uppercase_hex_is_invalid() {
    assert_eq!(
        parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
        None
    );
    assert_eq!(
        parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01"),
        None
    );
    assert_eq!(
        parse("0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        None
    );
}

#[test]
fn version_ff_is_invalid() {
    assert_eq!(
        parse("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        None
    );
}

#[test]
fn wrong_lengths_and_separators_are_invalid() {
    for value in [
        "",
        "00",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-+1",
    ] {
        assert_eq!(parse(value), None, "`{value}` is not a traceparent");
    }
}

#[test]
fn a_later_version_is_read_as_version_00_with_its_extra_fields_ignored() {
    let future =
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-will-be-like";
    let parent = parse(future).expect("a later version is read");
    assert_eq!(parent.to_string(), SPEC_EXAMPLE, "passed on as version 00");
    assert_eq!(
        parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        Some(parent),
        "a later version without extra fields"
    );
    assert_eq!(
        parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.what"),
        None,
        "extra fields start with a dash"
    );
}

#[test]
fn a_huge_value_is_refused_without_being_read() {
    let huge = format!(
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-{}",
        "x".repeat(10_000)
    );
    assert_eq!(parse(&huge), None);
}

#[test]
fn bytes_that_are_not_utf8_are_invalid_not_a_panic() {
    let mut value = SPEC_EXAMPLE.as_bytes().to_vec();
    value[10] = 0xff;
    assert_eq!(TraceParent::parse(&value), None);
    value[10] = 0xc3; // the start of a two-byte character, cut by the next field
    assert_eq!(TraceParent::parse(&value), None);
}

#[test]
fn a_tracestate_is_kept_as_is_when_bounded_and_printable() {
    let state = TraceState::parse(b"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE").expect("valid");
    assert_eq!(state.as_str(), "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
}

#[test]
fn an_oversized_or_unprintable_tracestate_is_dropped_whole() {
    assert_eq!(TraceState::parse("a=b,".repeat(200).as_bytes()), None);
    assert_eq!(TraceState::parse(b"a=b\nc=d"), None);
    assert_eq!(TraceState::parse("a=\u{e9}".as_bytes()), None);
    assert_eq!(TraceState::parse(b""), None);
    assert_eq!(TraceState::parse(b"   "), None);
    assert!(TraceState::parse(&[b'a'; TRACESTATE_MAX]).is_some());
}

#[test]
fn a_tracestate_without_a_valid_traceparent_is_dropped_with_it() {
    assert_eq!(TraceContext::from_headers(b"garbage", Some(b"a=b")), None);
    let context = TraceContext::from_headers(SPEC_EXAMPLE.as_bytes(), Some(b"a=b")).expect("valid");
    assert_eq!(context.state.as_ref().map(TraceState::as_str), Some("a=b"));
}

#[test]
fn a_started_trace_is_sampled_and_has_fresh_nonzero_ids() {
    let (one, two) = (TraceContext::start(), TraceContext::start());
    assert!(one.parent.sampled());
    assert_ne!(one.parent.trace_id, two.parent.trace_id);
    assert_eq!(
        parse(&one.parent.to_string()),
        Some(one.parent),
        "what is written is read back"
    );
}
