//! The three-node RabbitMQ cluster `.ci/cluster-broker.sh` starts for the cluster tests of
//! the `faults` binary (`cluster_restarts`, then `cluster_faults`): its nodes' URLs and names,
//! `rabbitmqctl` against one node, and the faults those tests deal it (a node stopped or
//! killed, every node stopped and started again).
//!
//! One test at a time has the cluster: [`Cluster::from_env`] waits for the one before to
//! drop it, because a fault dealt to the cluster lands on every test using it.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard};

use crate::support::unique;

/// Held by the test that has the cluster.
static IN_USE: Mutex<()> = Mutex::const_new(());

/// What [`Cluster::queue_table`] shows of each queue, in this order.
pub(crate) const QUEUE_COLUMNS: [&str; 6] = [
    "name",
    "messages",
    "messages_ready",
    "messages_unacknowledged",
    "consumers",
    "leader",
];

/// The cluster `.ci/cluster-broker.sh` started, for one test at a time.
pub(crate) struct Cluster {
    /// Every node, as one comma-separated list.
    pub(crate) amqp: String,
    pub(crate) urls: Vec<String>,
    pub(crate) nodes: Vec<String>,
    dir: String,
    ctl: String,
    _in_use: MutexGuard<'static, ()>,
}

impl Cluster {
    /// The cluster, once no other test has it; or `None` (the test skips, loudly) when
    /// there is none and `JOBHOST_REQUIRE_CLUSTER` is not `1`.
    pub(crate) async fn from_env() -> Option<Self> {
        let Ok(amqp) = std::env::var("JOBHOST_CLUSTER_AMQP") else {
            assert!(
                std::env::var("JOBHOST_REQUIRE_CLUSTER").as_deref() != Ok("1"),
                "JOBHOST_REQUIRE_CLUSTER=1 but JOBHOST_CLUSTER_AMQP is unset: run the test \
                 under `.ci/cluster-broker.sh`"
            );
            eprintln!(
                "SKIPPED: no RabbitMQ cluster (JOBHOST_CLUSTER_AMQP is unset); run the test \
                 under `.ci/cluster-broker.sh`, as `.ci/test` does"
            );
            return None;
        };
        let in_use = IN_USE.lock().await;
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by cluster-broker.sh"))
        };
        let urls = amqp.split(',').map(str::to_owned).collect();
        let nodes = var("JOBHOST_CLUSTER_NODES")
            .split(',')
            .map(str::to_owned)
            .collect();
        let cluster = Self {
            amqp,
            urls,
            nodes,
            dir: var("JOBHOST_CLUSTER_DIR"),
            ctl: var("JOBHOST_CLUSTER_CTL"),
            _in_use: in_use,
        };
        cluster.assert_every_node_runs();
        Some(cluster)
    }

    /// Fail unless every node runs: a test's faults assume a whole cluster, and
    /// `cluster_faults` leaves the node it kills dead (the script starts nodes, a test
    /// cannot), so `.ci/test` runs it after the other cluster tests.
    fn assert_every_node_runs(&self) {
        let output = self.run("rabbitmqctl", 0, &["-q", "cluster_status"]);
        let status = said(&output);
        let running = status
            .split("Running Nodes")
            .nth(1)
            .and_then(|rest| rest.split("Versions").next())
            .unwrap_or_default();
        let missing: Vec<&String> = self
            .nodes
            .iter()
            .filter(|node| !running.contains(node.as_str()))
            .collect();
        assert!(
            output.status.success() && missing.is_empty(),
            "the cluster's nodes {missing:?} are down (an earlier cluster test, such as \
             cluster_faults, which kills one, left them so): {status}"
        );
    }

    /// Run `tool` (`rabbitmqctl`, or `rabbitmq-queues` beside it) against `node`.
    pub(crate) fn run(&self, tool: &str, node: usize, args: &[&str]) -> Output {
        Command::new(Path::new(&self.ctl).with_file_name(tool))
            .env("HOME", &self.dir)
            .arg("-n")
            .arg(&self.nodes[node])
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("{tool} does not run: {error}"))
    }

    /// `rabbitmqctl ARGS` against `node`, which must succeed; what it printed.
    pub(crate) fn ctl(&self, node: usize, args: &[&str]) -> String {
        let output = self.run("rabbitmqctl", node, args);
        assert!(
            output.status.success(),
            "rabbitmqctl -n {} {args:?} failed: {}",
            self.nodes[node],
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Wait (at most `limit`) until losing `node` leaves every quorum queue a majority:
    /// a node just started again holds replicas that must catch up first.
    pub(crate) async fn await_not_quorum_critical(&self, node: usize, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let output = self.run(
                "rabbitmq-queues",
                node,
                &["check_if_node_is_quorum_critical"],
            );
            if output.status.success() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} stays quorum-critical for {limit:?}: {}",
                self.nodes[node],
                String::from_utf8_lossy(&output.stdout)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Every queue of the cluster as `rabbitmqctl list_queues` on `node` sees it: its
    /// messages (all, ready, unacknowledged) and consumers, which tells a job waiting in a
    /// hold queue, delivered to a consumer or stranded by the broker from one that is lost.
    pub(crate) fn queue_table(&self, node: usize) -> String {
        let list = ["-q", "-t", "30", "list_queues"];
        said(&self.run("rabbitmqctl", node, &[&list[..], &QUEUE_COLUMNS].concat()))
    }

    /// Move `queue`'s leader to node `to`, with the one-queue command of docs/scaling.md,
    /// "Watch hold queues after two failovers in a row", through
    /// `node`; returns what the broker said (`{migrated,NODE}`). The remedy when a hold
    /// queue strands expired messages: at-least-once dead-lettering runs in a worker its
    /// leader starts, two elections in quick succession can leave the leader without one
    /// (rabbitmq-server#15548, fixed upstream in 2026), and a new leader starts one.
    pub(crate) fn move_leader(&self, node: usize, queue: &str, to: &str) -> String {
        let command = format!(
            r#"{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"{queue}">>)), rabbit_quorum_queue:transfer_leadership(Q, {to})."#
        );
        said(&self.run("rabbitmqctl", node, &["eval", &command]))
            .trim()
            .to_owned()
    }

    /// SIGKILL the node's Erlang VM: no goodbye to its peers or clients.
    pub(crate) fn kill(&self, node: usize) {
        let name = self.nodes[node].split('@').next().expect("a node name");
        let pid = std::fs::read_to_string(format!("{}/{name}/pid", self.dir))
            .expect("the node's pid file");
        let status = Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "node {} is killed", self.nodes[node]);
    }

    /// Stop the broker on every node (`rabbitmqctl stop_app`), the last node last: its
    /// Erlang VM stays up, every client connection closes.
    pub(crate) fn stop_all(&self) {
        for node in 0..self.nodes.len() {
            self.ctl(node, &["stop_app"]);
        }
    }

    /// Start the broker again on `nodes` (`start_app`) at once, and return once each has
    /// started. Each node but the one stopped last waits for the others of the cluster to
    /// come back, so nodes stopped by [`Cluster::stop_all`] start together, or the last
    /// one first.
    pub(crate) async fn start(&self, nodes: &[usize]) {
        let starting: Vec<_> = nodes
            .iter()
            .map(|&node| {
                Command::new(Path::new(&self.ctl))
                    .env("HOME", &self.dir)
                    .args(["-n", &self.nodes[node], "start_app"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|error| panic!("rabbitmqctl does not run: {error}"))
            })
            .collect();
        tokio::task::block_in_place(|| {
            for (starting, &node) in starting.into_iter().zip(nodes) {
                let output = starting
                    .wait_with_output()
                    .expect("rabbitmqctl start_app ends");
                assert!(
                    output.status.success(),
                    "{} starts again: {}",
                    self.nodes[node],
                    said(&output)
                );
                self.ctl(node, &["await_startup"]);
            }
        });
    }

    /// A new virtual host of the cluster named after `what`, the cluster's `guest` allowed
    /// everything: queue names fixed by a plugin are then one test's alone. Its URL on
    /// each node, in the nodes' order; it goes with the cluster.
    pub(crate) fn vhost(&self, what: &str) -> Vec<String> {
        let name = unique(what);
        self.ctl(0, &["add_vhost", &name]);
        self.ctl(
            0,
            &["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"],
        );
        self.urls
            .iter()
            .map(|url| {
                let root = url.rsplit_once('/').map_or(url.as_str(), |(root, _)| root);
                format!("{root}/{name}")
            })
            .collect()
    }
}

/// What a command printed: its standard output, then its standard error.
pub(crate) fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
