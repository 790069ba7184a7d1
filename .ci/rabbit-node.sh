# Functions for the scripts that run RabbitMQ nodes of their own beside the machine's
# (tls-broker.sh, cluster-broker.sh); sourced, never run. A node keeps its data, logs and
# pid file in a directory of its own; HOME is its caller's work directory, which holds the
# Erlang cookie, `rabbitmq.conf` and `enabled_plugins`.

# The Debian package's /usr/sbin wrappers switch to the rabbitmq user and its cookie; the
# scripts behind them run as whoever calls them, with the cookie in $HOME.
rabbit_bin=/usr/lib/rabbitmq/bin
if [ ! -x "$rabbit_bin/rabbitmq-server" ]; then
    rabbit_bin="$(dirname "$(command -v rabbitmq-server)")"
fi

# rabbit_ctl HOME NODE ARG...: rabbitmqctl against NODE, with the cookie in HOME.
rabbit_ctl() {
    local home="$1" node="$2"
    shift 2
    HOME="$home" "$rabbit_bin/rabbitmqctl" -n "$node" "$@"
}

# rabbit_start HOME NODE DIR PORT DIST_PORT: start NODE in the background, listening for
# AMQP on 127.0.0.1:PORT and for its peers on DIST_PORT, with DIR/data, DIR/log and
# DIR/pid; its console output goes to DIR/log/console.log.
rabbit_start() {
    local home="$1" node="$2" dir="$3" port="$4" dist_port="$5"
    mkdir -p "$dir/data" "$dir/log"
    (
        export HOME="$home"
        export RABBITMQ_NODENAME="$node"
        export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
        export RABBITMQ_NODE_PORT="$port"
        export RABBITMQ_DIST_PORT="$dist_port"
        export RABBITMQ_CONFIG_FILE="$home/rabbitmq.conf"
        export RABBITMQ_ENABLED_PLUGINS_FILE="$home/enabled_plugins"
        export RABBITMQ_MNESIA_BASE="$dir/data"
        export RABBITMQ_LOG_BASE="$dir/log"
        export RABBITMQ_PID_FILE="$dir/pid"
        exec "$rabbit_bin/rabbitmq-server" >"$dir/log/console.log" 2>&1
    ) &
}

# rabbit_await HOME NODE DIR: wait, at most 120 s, until NODE has started; otherwise print
# the end of its console log and exit 1. `await_startup` fails at once while the node is
# not yet registered, so it is asked again.
rabbit_await() {
    local home="$1" node="$2" dir="$3"
    for _ in $(seq 1 120); do
        if rabbit_ctl "$home" "$node" await_startup >/dev/null 2>&1; then
            return 0
        fi
        sleep 1
    done
    echo "FATAL: RabbitMQ node $node did not start; its log:" >&2
    tail -50 "$dir/log/console.log" >&2 || true
    exit 1
}

# rabbit_stop HOME NODE DIR: stop NODE if it runs; one that has not stopped within 30 s is
# killed.
rabbit_stop() {
    local home="$1" node="$2" dir="$3"
    [ -f "$dir/pid" ] || return 0
    local pid
    pid="$(cat "$dir/pid")"
    rabbit_ctl "$home" "$node" stop >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    kill -9 "$pid" 2>/dev/null || true
}

# rabbit_evidence NODE DIR: the last errors and warnings of NODE's log, on stderr, for a
# failed run whose directory is about to go.
rabbit_evidence() {
    local node="$1" dir="$2"
    echo "--- $node: the last errors and warnings of its log" >&2
    grep -h -E "\[(error|warning)\]" "$dir/log/"*.log 2>/dev/null | tail -20 >&2 || true
}
