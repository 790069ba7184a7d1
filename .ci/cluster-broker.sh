#!/usr/bin/env bash
# Runs COMMAND... against a three-node RabbitMQ cluster of its own, then stops the nodes.
# The nodes run on this machine with their own names (jh1@localhost, jh2@localhost,
# jh3@localhost), AMQP ports (5681-5683), distribution ports (25681-25683), data, log and
# pid files and Erlang cookie, all in a temporary directory removed afterwards; nothing of
# the machine's own RabbitMQ node (127.0.0.1:5672) is touched. No plugin is enabled, so no
# management or Prometheus listener collides with another node's.
#
#   .ci/cluster-broker.sh cargo test -p jobhost --test cluster_faults -- --nocapture
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

# The Debian package's /usr/sbin wrappers switch to the rabbitmq user and its cookie; the
# scripts behind them run as whoever calls them, with the cookie in $HOME.
bin=/usr/lib/rabbitmq/bin
if [ ! -x "$bin/rabbitmq-server" ]; then
    bin="$(dirname "$(command -v rabbitmq-server)")"
fi
ctl="$bin/rabbitmqctl"

work="$(mktemp -d -t jobhost-cluster.XXXXXX)"
real_home="$HOME"

node_of() { echo "$1@localhost"; }

ctl_on() {
    local node="$1"
    shift
    HOME="$work" "$ctl" -n "$(node_of "$node")" "$@"
}

stop() {
    local status=$?
    for name in "${names[@]}"; do
        local pid_file="$work/$name/pid"
        [ -f "$pid_file" ] || continue
        local pid
        pid="$(cat "$pid_file")"
        ctl_on "$name" stop >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
    done
    for name in "${names[@]}"; do
        local pid_file="$work/$name/pid"
        [ -f "$pid_file" ] || continue
        local pid
        pid="$(cat "$pid_file")"
        # Bounded: a node that does not stop within 30 s is killed.
        for _ in $(seq 1 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        kill -9 "$pid" 2>/dev/null || true
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

# start_node INDEX: start node INDEX (0-based) in the background.
start_node() {
    local name="${names[$1]}"
    local dir="$work/$name"
    mkdir -p "$dir/data" "$dir/log"
    (
        export HOME="$work"
        export RABBITMQ_NODENAME="$(node_of "$name")"
        export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
        export RABBITMQ_NODE_PORT="$((base_port + $1))"
        export RABBITMQ_DIST_PORT="$((base_dist_port + $1))"
        export RABBITMQ_CONFIG_FILE="$work/rabbitmq.conf"
        export RABBITMQ_ENABLED_PLUGINS_FILE="$work/enabled_plugins"
        export RABBITMQ_MNESIA_BASE="$dir/data"
        export RABBITMQ_LOG_BASE="$dir/log"
        export RABBITMQ_PID_FILE="$dir/pid"
        exec "$bin/rabbitmq-server" >"$dir/log/console.log" 2>&1
    ) &
}

# await_node INDEX: wait until node INDEX is up, for at most 120 s.
await_node() {
    local name="${names[$1]}"
    for _ in $(seq 1 120); do
        if ctl_on "$name" await_startup >/dev/null 2>&1; then
            return 0
        fi
        sleep 1
    done
    echo "FATAL: RabbitMQ node $(node_of "$name") did not start; its log:" >&2
    tail -50 "$work/$name/log/console.log" >&2 || true
    exit 1
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
    start_node "$i"
done
for i in 0 1 2; do
    await_node "$i"
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
