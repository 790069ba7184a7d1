//! Faults under load, each job counted in a ledger kept apart from the hosts: the fault
//! suite on the test broker (`faults_suite`, with its `scenarios`), and scale-out and high
//! availability on a three-node cluster (`cluster_faults`).
//!
//! The fault suite needs the broker at `AMQP_URL` and `rabbitmqctl` for it: it stops and
//! starts the broker application, so it runs in a binary apart from the other broker
//! tests. The cluster scenario needs the nodes `.ci/cluster-broker.sh` starts; without
//! them it says so and passes.
//!
//! ```text
//! cargo test -p jobhost --test faults -- --nocapture
//! .ci/cluster-broker.sh cargo test -p jobhost --test faults cluster_faults:: -- --nocapture
//! ```

#[path = "../support/mod.rs"]
mod support;

mod cluster_faults;
mod faults_suite;
mod scenarios;
