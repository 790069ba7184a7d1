//! The RabbitMQ backend against a real broker: topology, publishing and settling, hold
//! queues and their sweeper, quorum queues, expiry, unique jobs, caps and rates, trace
//! context, hostile messages, reconnects and stops, hot reload under load, `queuey`
//! interoperability, the operator's dead-letter helpers, credentials, fleets of `jobhost
//! run` processes (pause, resume and cancel; a schedule through a SIGKILL of its leader;
//! batches and their callbacks through a SIGKILL),
//! and a Python plugin built and run as a user does. Also the typed producer, on the memory
//! backend.
//!
//! Needs the broker at `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`) and
//! `rabbitmqctl` for it; without one every broker test fails, unless
//! `JOBHOST_SKIP_BROKER_TESTS=1` asks to skip them. Tests that run fixtures with fixed
//! queue names either take turns on them (`support::worker::fixture_queues`) or run in a
//! virtual host of their own (`support::Vhost`).
//!
//! `rabbitmq_tls` needs a TLS-only node, which `.ci/tls-broker.sh` starts; without it,
//! its tests say so and pass:
//!
//! ```text
//! cargo test -p jobhost --test rabbitmq
//! .ci/tls-broker.sh cargo test -p jobhost --test rabbitmq rabbitmq_tls::
//! ```

#[path = "../support/mod.rs"]
mod support;

mod producer;
mod rabbitmq_admin;
mod rabbitmq_batches;
mod rabbitmq_caps;
mod rabbitmq_connect;
mod rabbitmq_control;
mod rabbitmq_credentials;
mod rabbitmq_expiry;
mod rabbitmq_hold_sweep;
mod rabbitmq_hostile;
mod rabbitmq_messages;
mod rabbitmq_outbound;
mod rabbitmq_python;
mod rabbitmq_queuey;
mod rabbitmq_quorum;
mod rabbitmq_reconnect;
mod rabbitmq_reload;
mod rabbitmq_replay;
mod rabbitmq_schedule;
mod rabbitmq_stop;
mod rabbitmq_tls;
mod rabbitmq_topology;
mod rabbitmq_trace;
mod rabbitmq_unique;
mod rabbitmq_worker;
