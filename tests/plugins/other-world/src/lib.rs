//! Test plugin: a valid component of another world (`test:other-world/greeter`), so tests
//! can assert that the host refuses it at load with a message that says it is not a
//! jobhost plugin. It uses wit-bindgen directly, as a non-jobhost component would.

// The generated export glue is `unsafe` by nature (`export_name`, raw ABI pointers).
#![allow(unsafe_code)]

wit_bindgen::generate!({ path: "wit", world: "greeter" });

struct Greeter;

impl Guest for Greeter {
    fn greet(name: String) -> String {
        format!("hello, {name}")
    }
}

export!(Greeter);
