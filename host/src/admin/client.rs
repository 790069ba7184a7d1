//! A client of a running host's admin API: one HTTP/1.1 connection per request, because
//! the CLI makes one or two requests and exits.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;

use super::api::{
    DeadLetterList, EnqueueRequest, Enqueued, ErrorBody, Health, Order, OrderRequest, PluginView,
    PolicyReport, PurgeReport, RecordingsRequest, ReplayReport, ScheduleView,
};
use super::dashboard::LoginView;
use crate::job::Recording;

/// How long connecting may take: the API is local, so anything longer means no host.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a request may take; a replay against a busy broker is the slowest.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest answer read: a recordings lookup answers at most
/// [`LOOKUP_MAX_BYTES`](crate::broker::LOOKUP_MAX_BYTES) of recordings (which JSON's
/// escapes may grow), every other answer far less; past this the client stops reading,
/// whatever the other end is.
const ANSWER_MAX: usize = 4 * crate::broker::LOOKUP_MAX_BYTES;

/// Why a request to the admin API failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Nothing answers at the address.
    #[error("no jobhost admin API answers at `{addr}`: {reason}")]
    Unreachable {
        /// The address tried.
        addr: String,
        /// The connection error.
        reason: String,
    },
    /// The host answered with an error.
    #[error("{message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The host's message.
        message: String,
    },
    /// The answer was not what the API sends.
    #[error("`{addr}` answered `{path}` with something else than the admin API's JSON: {reason}")]
    Protocol {
        /// The address asked.
        addr: String,
        /// The path asked.
        path: String,
        /// What was wrong.
        reason: String,
    },
}

impl ClientError {
    /// Whether the host or its broker could not be reached, rather than refusing the
    /// operation: the host is not running, or its broker is down (503).
    pub fn is_unreachable(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Api { status, .. } => *status == StatusCode::SERVICE_UNAVAILABLE.as_u16(),
            Self::Protocol { .. } => false,
        }
    }
}

/// The admin API of the host at `addr` (`host:port`).
#[derive(Clone)]
pub struct AdminClient {
    addr: String,
    token: Option<String>,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

impl AdminClient {
    /// A client of the API at `addr`, without a token; nothing is contacted yet.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            token: None,
        }
    }

    /// Send `token` as `Authorization: Bearer`, which the host requires of the requests
    /// that change jobs (enqueue, replay, purge, pause, resume, cancel).
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The address it talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `GET /healthz`.
    pub async fn health(&self) -> Result<Health, ClientError> {
        self.call(Method::GET, "/healthz", None::<&()>).await
    }

    /// `GET /plugins`.
    pub async fn plugins(&self) -> Result<Vec<PluginView>, ClientError> {
        self.call(Method::GET, "/plugins", None::<&()>).await
    }

    /// `GET /schedules`.
    pub async fn schedules(&self) -> Result<Vec<ScheduleView>, ClientError> {
        self.call(Method::GET, "/schedules", None::<&()>).await
    }

    /// `GET /recordings/{job_id}`: the kept recordings of the job's attempts.
    pub async fn recordings(&self, job_id: uuid::Uuid) -> Result<Vec<Recording>, ClientError> {
        self.call(Method::GET, &format!("/recordings/{job_id}"), None::<&()>)
            .await
    }

    /// `POST /recordings`: the kept recordings of up to
    /// [`MAX_RECORDINGS_ASKED`](super::MAX_RECORDINGS_ASKED) jobs.
    pub async fn find_recordings(
        &self,
        job_ids: &[uuid::Uuid],
    ) -> Result<Vec<Recording>, ClientError> {
        let request = RecordingsRequest {
            job_ids: job_ids.to_vec(),
        };
        self.call(Method::POST, "/recordings", Some(&request)).await
    }

    /// `GET /policy/{job_type}`.
    pub async fn policy(&self, job_type: &str) -> Result<PolicyReport, ClientError> {
        let path = format!("/policy/{}", segment(job_type));
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `POST /api/login`: a dashboard login link, `http://ADDR/?login=LOGIN`, good for one
    /// browser within [`LOGIN_LIFETIME`](super::LOGIN_LIFETIME); needs the token.
    pub async fn login_link(&self) -> Result<String, ClientError> {
        let login: LoginView = self.call(Method::POST, "/api/login", None::<&()>).await?;
        Ok(format!("http://{}/?login={}", self.addr, login.login))
    }

    /// `POST /jobs`.
    pub async fn enqueue(&self, request: &EnqueueRequest) -> Result<Enqueued, ClientError> {
        self.call(Method::POST, "/jobs", Some(request)).await
    }

    /// `POST /batches`: open a batch.
    pub async fn open_batch(
        &self,
        request: &crate::batches::BatchRequest,
    ) -> Result<crate::batches::BatchOpened, ClientError> {
        self.call(Method::POST, "/batches", Some(request)).await
    }

    /// `GET /batches`: the newest batches.
    pub async fn batches(&self) -> Result<Vec<crate::batches::BatchView>, ClientError> {
        self.call(Method::GET, "/batches", None::<&()>).await
    }

    /// `GET /batches/{batch_id}`: one batch.
    pub async fn batch(
        &self,
        batch_id: uuid::Uuid,
    ) -> Result<crate::batches::BatchView, ClientError> {
        self.call(Method::GET, &format!("/batches/{batch_id}"), None::<&()>)
            .await
    }

    /// `GET /dead/{queue}?limit=N`.
    pub async fn dead_letters(
        &self,
        queue: &str,
        limit: usize,
    ) -> Result<DeadLetterList, ClientError> {
        let path = format!("/dead/{}?limit={limit}", segment(queue));
        self.call(Method::GET, &path, None::<&()>).await
    }

    /// `POST /dead/{queue}/replay`.
    pub async fn replay_dead_letters(&self, queue: &str) -> Result<ReplayReport, ClientError> {
        let path = format!("/dead/{}/replay", segment(queue));
        self.call(Method::POST, &path, None::<&()>).await
    }

    /// `DELETE /dead/{queue}`.
    pub async fn purge_dead_letters(&self, queue: &str) -> Result<PurgeReport, ClientError> {
        let path = format!("/dead/{}", segment(queue));
        self.call(Method::DELETE, &path, None::<&()>).await
    }

    /// `POST /queues/{queue}/pause`, or `/resume` when `pause` is false.
    pub async fn pause_queue(
        &self,
        queue: &str,
        pause: bool,
        request: &OrderRequest,
    ) -> Result<Order, ClientError> {
        let action = if pause { "pause" } else { "resume" };
        let path = format!("/queues/{}/{action}", segment(queue));
        self.call(Method::POST, &path, Some(request)).await
    }

    /// `POST /jobs/{job_id}/cancel`.
    pub async fn cancel_job(
        &self,
        job_id: uuid::Uuid,
        request: &OrderRequest,
    ) -> Result<Order, ClientError> {
        let path = format!("/jobs/{job_id}/cancel");
        self.call(Method::POST, &path, Some(request)).await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let protocol = |reason: String| ClientError::Protocol {
            addr: self.addr.clone(),
            path: path.to_owned(),
            reason,
        };
        let body = match body {
            Some(body) => serde_json::to_vec(body).map_err(|e| protocol(e.to_string()))?,
            None => Vec::new(),
        };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, &self.addr)
            .header(CONTENT_TYPE, "application/json");
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| protocol(e.to_string()))?;
        let (status, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, self.send(request))
            .await
            .map_err(|_| self.unreachable(format!("no answer within {REQUEST_TIMEOUT:?}")))??;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| protocol(e.to_string()));
        }
        let message = serde_json::from_slice::<ErrorBody>(&bytes)
            .map(|body| body.error)
            .unwrap_or_else(|_| format!("{status}: {}", String::from_utf8_lossy(&bytes)));
        Err(ClientError::Api {
            status: status.as_u16(),
            message,
        })
    }

    async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| self.unreachable(format!("no connection within {CONNECT_TIMEOUT:?}")))?
            .map_err(|e| self.unreachable(e.to_string()))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.unreachable(e.to_string()))?;
        // The connection ends once the sender is dropped, when this request is done.
        tokio::spawn(connection);
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.unreachable(e.to_string()))?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), ANSWER_MAX)
            .collect()
            .await
            .map_err(|e| self.unreachable(e.to_string()))?
            .to_bytes();
        Ok((status, bytes))
    }

    fn unreachable(&self, reason: String) -> ClientError {
        ClientError::Unreachable {
            addr: self.addr.clone(),
            reason,
        }
    }
}

/// `value` as one path segment: job types and queue names are dotted identifiers, so only
/// the characters that would change the path's meaning are escaped.
fn segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                out.push(char::from(byte));
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn path_segments_keep_dotted_names_and_escape_the_rest() {
        assert_eq!(segment("scripted.JitteredJob"), "scripted.JitteredJob");
        assert_eq!(segment("a/b c?"), "a%2Fb%20c%3F");
    }
}
