//! An error answer of the admin API: a status and a message saying what to do.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::api::ErrorBody;
use crate::broker::BrokerError;

/// An error answer: a status and a message saying what to do.
#[derive(Debug)]
pub(super) struct ApiError {
    pub(super) status: StatusCode,
    message: String,
    existing_job_id: Option<Uuid>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: String) -> Self {
        Self {
            status,
            message,
            existing_job_id: None,
        }
    }
}

impl From<BrokerError> for ApiError {
    fn from(err: BrokerError) -> Self {
        let status = match err {
            BrokerError::Connection(_) | BrokerError::Closed => StatusCode::SERVICE_UNAVAILABLE,
            BrokerError::UnknownQueue(_) => StatusCode::NOT_FOUND,
            BrokerError::DelayTooLong { .. }
            | BrokerError::InvalidQueueName { .. }
            | BrokerError::InvalidUnique { .. } => StatusCode::BAD_REQUEST,
            BrokerError::Duplicate { .. } => StatusCode::CONFLICT,
            _ => StatusCode::BAD_GATEWAY,
        };
        let existing_job_id = match err {
            BrokerError::Duplicate { existing, .. } => existing,
            _ => None,
        };
        Self {
            status,
            message: err.to_string(),
            existing_job_id,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
                existing_job_id: self.existing_job_id,
            }),
        )
            .into_response()
    }
}
