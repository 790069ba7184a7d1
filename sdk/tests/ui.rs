//! Compile-fail cases: one file per mistake in `tests/ui/`, named after the mistake, each
//! with the `.stderr` the compiler must print.
//!
//! After changing a message, regenerate the snapshots and read every changed one:
//!
//! ```text
//! TRYBUILD=overwrite cargo test -p jobhost-sdk --test ui
//! ```

#[test]
fn every_mistake_in_a_derive_attribute_is_a_compile_error_naming_the_key() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
