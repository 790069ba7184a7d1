//! What the fault tests share with the fleet tests on RabbitMQ: an independent ledger of
//! outcomes read from the broker, in a virtual host of its own; a `jobhost run` process
//! that can be stopped or killed; the summary table; and the three-node cluster of the
//! cluster tests.

pub(crate) mod cluster;
pub(crate) mod ledger;
pub(crate) mod process;
pub(crate) mod table;
