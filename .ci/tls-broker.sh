#!/usr/bin/env bash
# Runs COMMAND... against a RabbitMQ node of its own that listens only on TLS, then stops
# the node. Certificates (a CA, the server's, a client's) are made here with openssl, in
# a temporary directory that is removed afterwards; nothing of the machine's own RabbitMQ
# node (127.0.0.1:5672) is touched: the TLS node has its own name, ports, Erlang cookie,
# data, log and config.
#
#   .ci/tls-broker.sh cargo test -p jobhost --test rabbitmq_tls
#
# COMMAND sees:
#   JOBHOST_TLS_URL          amqps://guest:guest@localhost:PORT/%2f
#   JOBHOST_TLS_CA           the CA that signed the server's and the client's certificates
#   JOBHOST_TLS_CLIENT_CERT  the client certificate (CN=jobhost-tls-client, a broker user
#   JOBHOST_TLS_CLIENT_KEY   that logs in with EXTERNAL) and its key
# Ports: JOBHOST_TLS_PORT (default 6671) and JOBHOST_TLS_DIST_PORT (default 26672).
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi

port="${JOBHOST_TLS_PORT:-6671}"
dist_port="${JOBHOST_TLS_DIST_PORT:-26672}"
node="jobhost-tls@localhost"
client_cn="jobhost-tls-client"

# The Debian package's /usr/sbin wrappers switch to the rabbitmq user and its cookie; the
# scripts behind them run as whoever calls them, with the cookie in $HOME.
bin=/usr/lib/rabbitmq/bin
if [ ! -x "$bin/rabbitmq-server" ]; then
    bin="$(dirname "$(command -v rabbitmq-server)")"
fi

work="$(mktemp -d -t jobhost-tls.XXXXXX)"
server_pid=""

stop() {
    if [ -n "$server_pid" ]; then
        HOME="$work" "$bin/rabbitmqctl" -n "$node" stop >/dev/null 2>&1 || kill "$server_pid" 2>/dev/null || true
        # Bounded: a node that does not stop within 30 s is killed.
        for _ in $(seq 1 30); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 1
        done
        kill -9 "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap stop EXIT

make_certificates() {
    cd "$work"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=jobhost test CA" -keyout ca.key -out ca.pem \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    sign server "/CN=localhost" "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
    sign client "/CN=$client_cn" "extendedKeyUsage=clientAuth"
    cd - >/dev/null
}

# sign NAME SUBJECT EXTENSIONS: NAME.key (PKCS#8) and NAME.pem signed by the CA.
sign() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null
    openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}

write_config() {
    cat >"$work/rabbitmq.conf" <<EOF
listeners.tcp = none
listeners.ssl.default = 127.0.0.1:$port
ssl_options.cacertfile = $work/ca.pem
ssl_options.certfile = $work/server.pem
ssl_options.keyfile = $work/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = false
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = EXTERNAL
ssl_cert_login_from = common_name
EOF
    echo '[rabbitmq_auth_mechanism_ssl].' >"$work/enabled_plugins"
}

start_node() {
    mkdir -p "$work/data" "$work/log"
    export HOME="$work"
    export RABBITMQ_NODENAME="$node"
    export RABBITMQ_NODE_PORT="$((port + 1))"
    export RABBITMQ_DIST_PORT="$dist_port"
    export RABBITMQ_CONFIG_FILE="$work/rabbitmq.conf"
    export RABBITMQ_ENABLED_PLUGINS_FILE="$work/enabled_plugins"
    export RABBITMQ_MNESIA_BASE="$work/data"
    export RABBITMQ_LOG_BASE="$work/log"
    export RABBITMQ_PID_FILE="$work/node.pid"
    "$bin/rabbitmq-server" >"$work/log/console.log" 2>&1 &
    server_pid=$!
    # `await_startup` fails at once while the node is not yet registered, so it is asked
    # again, for at most 120 s, as long as the node process lives.
    local up=""
    for _ in $(seq 1 120); do
        if "$bin/rabbitmqctl" -n "$node" await_startup >/dev/null 2>&1; then
            up=yes
            break
        fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 1
    done
    if [ -z "$up" ]; then
        echo "FATAL: the TLS RabbitMQ node did not start; its log:" >&2
        tail -50 "$work/log/console.log" >&2 || true
        exit 1
    fi
    "$bin/rabbitmqctl" -n "$node" add_user "$client_cn" "$(openssl rand -hex 16)" >/dev/null
    "$bin/rabbitmqctl" -n "$node" set_permissions -p / "$client_cn" '.*' '.*' '.*' >/dev/null
    unset RABBITMQ_NODENAME RABBITMQ_NODE_PORT RABBITMQ_DIST_PORT RABBITMQ_CONFIG_FILE \
        RABBITMQ_ENABLED_PLUGINS_FILE RABBITMQ_MNESIA_BASE RABBITMQ_LOG_BASE RABBITMQ_PID_FILE
}

real_home="$HOME"
make_certificates
write_config
start_node
echo "TLS RabbitMQ node $node listens on 127.0.0.1:$port"

export HOME="$real_home"
export JOBHOST_TLS_URL="amqps://guest:guest@localhost:$port/%2f"
export JOBHOST_TLS_CA="$work/ca.pem"
export JOBHOST_TLS_CLIENT_CERT="$work/client.pem"
export JOBHOST_TLS_CLIENT_KEY="$work/client.key"
status=0
"$@" || status=$?
exit "$status"
