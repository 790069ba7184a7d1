//! [`Batches`] on RabbitMQ: the batch log is the stream queue [`BATCHES_STREAM`], which
//! keeps every record for [`BATCHES_RETENTION`] whoever reads it, so every host folds every
//! record, and a host that starts reads the log from its oldest record kept.
//!
//! A session declares the stream once, before its first record; a record returned as
//! unroutable (the stream deleted under the fleet) makes the next one declare it again.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::RabbitMqBackend;
use super::codec::order_properties;
use super::session::Failure;
use super::stream::{Read, StreamReader, StreamSpec, declare_stream};
use crate::broker::BrokerError;
use crate::broker::batches::{
    BATCHES_RETENTION, BATCHES_STREAM, BatchFollower, BatchRecord, Batches,
};

/// How many records the broker sends a follower ahead of its acks: the log has one
/// record per member that ends, so it is read in large steps.
const FOLLOW_PREFETCH: u16 = 1_000;

/// The batch log.
static BATCH_LOG: StreamSpec = StreamSpec {
    name: BATCHES_STREAM,
    retention: BATCHES_RETENTION,
    segment_bytes: 50_000_000,
};

impl RabbitMqBackend {
    /// Publish `record` to the batch log, for
    /// [`Backend::record_batch`](crate::broker::Backend::record_batch).
    pub(super) async fn append_batch_record(
        &self,
        record: &BatchRecord,
    ) -> Result<(), BrokerError> {
        let body = &record.encode();
        self.link
            .run(|session| async move {
                if !session.batch_log_declared.load(Ordering::Relaxed) {
                    declare_stream(&session, &BATCH_LOG).await?;
                    session.batch_log_declared.store(true, Ordering::Relaxed);
                }
                let published = session
                    .publish(BATCHES_STREAM, body, order_properties())
                    .await;
                if let Err(Failure::Final(BrokerError::Unroutable { .. })) = &published {
                    session.batch_log_declared.store(false, Ordering::Relaxed);
                }
                published
            })
            .await
    }
}

impl Batches for RabbitMqBackend {
    type BatchFollower = RabbitMqBatchFollower;

    async fn follow_batches(&self) -> Result<RabbitMqBatchFollower, BrokerError> {
        Ok(RabbitMqBatchFollower(StreamReader::new(
            Arc::clone(&self.link),
            &BATCH_LOG,
            FOLLOW_PREFETCH,
        )))
    }
}

/// A follower of the batch log across reconnects, each (re)subscription from the oldest
/// record kept.
#[derive(Debug)]
pub struct RabbitMqBatchFollower(StreamReader);

impl BatchFollower for RabbitMqBatchFollower {
    async fn next(&mut self) -> Option<BatchRecord> {
        loop {
            match self.0.next().await? {
                Read::Joined => {}
                Read::Body(body) => match BatchRecord::decode(&body) {
                    Ok(record) => return Some(record),
                    Err(error) => {
                        tracing::warn!(stream = BATCHES_STREAM, %error, "skipping a message that is not a batch record");
                    }
                },
            }
        }
    }
}
