//! jobhost: a RabbitMQ job host whose job handlers are WebAssembly components.
//!
//! # Table of contents
//! - [`envelope`]: the JSON envelope every job travels in, shared with the `queuey` crate.
//! - [`broker`]: the [`broker::Backend`] seam and its implementations.

#![warn(missing_docs)]

pub mod broker;
pub mod envelope;
