//! What the fault tests share with the fleet tests on RabbitMQ: an independent ledger of
//! outcomes read from the broker, in a virtual host of its own; a `jobhost run` process
//! that can be stopped or killed; and the summary table.

pub(crate) mod ledger;
pub(crate) mod process;
pub(crate) mod table;
