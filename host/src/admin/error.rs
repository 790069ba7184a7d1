//! An error answer of the admin API: a status and a message saying what to do.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::api::ErrorBody;
use crate::broker::BrokerError;

/// An error answer: a status and a message saying what to do.
#[derive(Debug)]
pub(super) struct ApiError {
    pub(super) status: StatusCode,
    message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: String) -> Self {
        Self { status, message }
    }
}

impl From<BrokerError> for ApiError {
    fn from(err: BrokerError) -> Self {
        let status = match err {
            BrokerError::Connection(_) | BrokerError::Closed => StatusCode::SERVICE_UNAVAILABLE,
            BrokerError::UnknownQueue(_) => StatusCode::NOT_FOUND,
            BrokerError::DelayTooLong { .. } | BrokerError::InvalidQueueName { .. } => {
                StatusCode::BAD_REQUEST
            }
            _ => StatusCode::BAD_GATEWAY,
        };
        Self {
            status,
            message: err.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
            }),
        )
            .into_response()
    }
}
