//! Faults under load, each job counted in a ledger kept apart from the hosts: the fault
//! suite on the test broker (`faults_suite`, with its `scenarios`), scale-out and high
//! availability on a three-node cluster (`cluster_faults`), what pauses, unique keys,
//! caps and rate limits keep across a restart of that cluster (`cluster_restarts`), and a
//! schedule's firings across it (`cluster_schedules`).
//!
//! The fault suite needs the broker at `AMQP_URL` and `rabbitmqctl` for it: it stops and
//! starts the broker application, so it runs in a binary apart from the other broker
//! tests. The cluster tests need the nodes `.ci/cluster-broker.sh` starts; without them
//! they say so and pass. `cluster_faults` kills a node for good, so on one cluster it runs
//! last (`.ci/test` runs `cluster_restarts` and `cluster_schedules` first).
//!
//! ```text
//! cargo test -p jobhost --test faults -- --nocapture
//! .ci/cluster-broker.sh cargo test -p jobhost --test faults cluster_restarts:: -- --nocapture
//! .ci/cluster-broker.sh cargo test -p jobhost --test faults cluster_schedules:: -- --nocapture
//! .ci/cluster-broker.sh cargo test -p jobhost --test faults cluster_faults:: -- --nocapture
//! ```

#[path = "../support/mod.rs"]
mod support;

mod cluster_faults;
mod cluster_restarts;
mod cluster_schedules;
mod faults_suite;
mod scenarios;
