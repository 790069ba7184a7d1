//! What a failure's exit code is, and what to do about it.

use std::io::ErrorKind;

use jobhost::admin::ClientError;
use jobhost::broker::BrokerError;

/// The operation failed.
pub(crate) const EXIT_FAILED: u8 = 1;
/// The host or the broker cannot be reached.
const EXIT_UNREACHABLE: u8 = 3;

/// The exit code of a failure and a hint for the person who met it.
#[derive(Debug)]
pub(crate) struct Diagnosis {
    pub(crate) code: u8,
    pub(crate) hint: Option<&'static str>,
}

/// Classify `err` by the first cause in its chain that says who is at fault.
pub(crate) fn diagnose(err: &anyhow::Error) -> Diagnosis {
    for cause in err.chain() {
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            if client.is_unreachable() {
                return Diagnosis {
                    code: EXIT_UNREACHABLE,
                    hint: Some(
                        "is `jobhost run` running? Start it in another terminal with `jobhost run` \
                         (add `--amqp URL` for RabbitMQ), or pass `--admin ADDR` where it listens",
                    ),
                };
            }
            return failed(None);
        }
        if let Some(BrokerError::Connection(reason)) = cause.downcast_ref::<BrokerError>()
            && reason.contains("invalid peer certificate")
        {
            return Diagnosis {
                code: EXIT_UNREACHABLE,
                hint: Some(
                    "the broker's TLS certificate is not trusted: pass `--amqp-ca-file` with \
                     the CA that signed it, and check that the URL's host is a name in it",
                ),
            };
        }
        if let Some(BrokerError::Connection(_) | BrokerError::Closed) =
            cause.downcast_ref::<BrokerError>()
        {
            return Diagnosis {
                code: EXIT_UNREACHABLE,
                hint: Some(
                    "is RabbitMQ running and the URL right? Start it (e.g. `rabbitmq-server \
                     -detached`), or leave out `--amqp`/AMQP_URL to use the in-memory broker",
                ),
            };
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == ErrorKind::AddrInUse
        {
            return failed(Some(
                "another program (another `jobhost run`?) listens on that address: stop it, \
                 or pass `--admin 127.0.0.1:PORT` with a free port",
            ));
        }
    }
    failed(None)
}

fn failed(hint: Option<&'static str>) -> Diagnosis {
    Diagnosis {
        code: EXIT_FAILED,
        hint,
    }
}
