#!/usr/bin/env bash
# Runs COMMAND... against a three-node RabbitMQ cluster of its own, then stops the nodes.
# The nodes run on this machine with their own names (jh1@localhost, jh2@localhost,
# jh3@localhost), AMQP ports (5681-5683), distribution ports (25681-25683), data, log and
# pid files and Erlang cookie, all in a temporary directory removed afterwards; nothing of
# the machine's own RabbitMQ node (127.0.0.1:5672) is touched. No plugin is enabled, so no
# management or Prometheus listener collides with another node's.
#
#   .ci/cluster-broker.sh cargo test -p jobhost --test faults cluster_faults:: -- --nocapture
#
# COMMAND sees:
#   JOBHOST_CLUSTER_AMQP   amqp://guest:guest@127.0.0.1:5681/%2f,...:5682/%2f,...:5683/%2f
#   JOBHOST_CLUSTER_NODES  jh1@localhost,jh2@localhost,jh3@localhost (same order)
#   JOBHOST_CLUSTER_DIR    the nodes' directory: HOME for `rabbitmqctl -n NODE ...` (it
#                          holds the cluster's Erlang cookie), NODE/pid the OS process id
#   JOBHOST_CLUSTER_CTL    the rabbitmqctl to call with HOME=$JOBHOST_CLUSTER_DIR
# Ports: JOBHOST_CLUSTER_PORT (default 5681, then +1, +2) and JOBHOST_CLUSTER_DIST_PORT
# (default 25681, then +1, +2).
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi

base_port="${JOBHOST_CLUSTER_PORT:-5681}"
base_dist_port="${JOBHOST_CLUSTER_DIST_PORT:-25681}"
names=(jh1 jh2 jh3)

. "$(dirname "$0")/rabbit-node.sh"
ctl="$rabbit_bin/rabbitmqctl"

work="$(mktemp -d -t jobhost-cluster.XXXXXX)"
real_home="$HOME"

node_of() { echo "$1@localhost"; }

ctl_on() {
    local name="$1"
    shift
    rabbit_ctl "$work" "$(node_of "$name")" "$@"
}

stop() {
    local status=$?
    for name in "${names[@]}"; do
        [ "$status" -eq 0 ] || rabbit_evidence "$(node_of "$name")" "$work/$name"
        rabbit_stop "$work" "$(node_of "$name")" "$work/$name"
    done
    rm -rf "$work"
    exit "$status"
}
trap stop EXIT

write_shared_files() {
    # One cookie for the three nodes and for rabbitmqctl, so they can talk to each other.
    openssl rand -hex 20 >"$work/.erlang.cookie"
    chmod 400 "$work/.erlang.cookie"
    : >"$work/enabled_plugins"
    # Three nodes share the machine with the main broker: each blocks publishers above
    # 1 GiB of memory, and the temporary directory needs little disk.
    cat >"$work/rabbitmq.conf" <<EOF
vm_memory_high_watermark.absolute = 1GiB
disk_free_limit.absolute = 50MB
EOF
}

join_first() {
    local name="${names[$1]}"
    ctl_on "$name" stop_app >/dev/null
    ctl_on "$name" reset >/dev/null
    ctl_on "$name" join_cluster "$(node_of "${names[0]}")" >/dev/null 2>&1
    ctl_on "$name" start_app >/dev/null
}

write_shared_files
for i in 0 1 2; do
    rabbit_start "$work" "$(node_of "${names[$i]}")" "$work/${names[$i]}" \
        "$((base_port + i))" "$((base_dist_port + i))"
done
for name in "${names[@]}"; do
    rabbit_await "$work" "$(node_of "$name")" "$work/$name"
done
join_first 1
join_first 2
ctl_on "${names[0]}" await_online_nodes 3 >/dev/null
echo "RabbitMQ cluster of $(node_of jh1), $(node_of jh2), $(node_of jh3) listens on 127.0.0.1:$base_port-$((base_port + 2))"

urls=()
nodes=()
for i in 0 1 2; do
    urls+=("amqp://guest:guest@127.0.0.1:$((base_port + i))/%2f")
    nodes+=("$(node_of "${names[$i]}")")
done
export HOME="$real_home"
JOBHOST_CLUSTER_AMQP="$(IFS=,; echo "${urls[*]}")"
JOBHOST_CLUSTER_NODES="$(IFS=,; echo "${nodes[*]}")"
export JOBHOST_CLUSTER_AMQP JOBHOST_CLUSTER_NODES
export JOBHOST_CLUSTER_DIR="$work"
export JOBHOST_CLUSTER_CTL="$ctl"
"$@"
