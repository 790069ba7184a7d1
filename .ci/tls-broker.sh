#!/usr/bin/env bash
# Runs COMMAND... against a RabbitMQ node of its own that listens only on TLS, then stops
# the node. Certificates (a CA, the server's, a client's) are made here with openssl, in
# a temporary directory that is removed afterwards; nothing of the machine's own RabbitMQ
# node (127.0.0.1:5672) is touched: the TLS node has its own name, ports, Erlang cookie,
# data, log and config.
#
#   .ci/tls-broker.sh cargo test -p jobhost --test rabbitmq rabbitmq_tls::
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

. "$(dirname "$0")/rabbit-node.sh"

work="$(mktemp -d -t jobhost-tls.XXXXXX)"

stop() {
    local status=$?
    [ "$status" -eq 0 ] || rabbit_evidence "$node" "$work/node"
    rabbit_stop "$work" "$node" "$work/node"
    rm -rf "$work"
    exit "$status"
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

# start_node: the node, and the broker user its client certificate logs in as.
start_node() {
    # The AMQP port without TLS is closed by `listeners.tcp = none`; it is set apart only so
    # that it never collides with another node's.
    rabbit_start "$work" "$node" "$work/node" "$((port + 1))" "$dist_port"
    rabbit_await "$work" "$node" "$work/node"
    rabbit_ctl "$work" "$node" add_user "$client_cn" "$(openssl rand -hex 16)" >/dev/null
    rabbit_ctl "$work" "$node" set_permissions -p / "$client_cn" '.*' '.*' '.*' >/dev/null
}

make_certificates
write_config
start_node
echo "TLS RabbitMQ node $node listens on 127.0.0.1:$port"

export JOBHOST_TLS_URL="amqps://guest:guest@localhost:$port/%2f"
export JOBHOST_TLS_CA="$work/ca.pem"
export JOBHOST_TLS_CLIENT_CERT="$work/client.pem"
export JOBHOST_TLS_CLIENT_KEY="$work/client.key"
"$@"
