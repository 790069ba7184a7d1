//! Test plugin: one job per capability the host must deny, on queue `test.sandbox`.
//!
//! Each handler returns `Ok` only if the capability WORKED, and otherwise a retryable error
//! carrying the OS error, so a test asserts denial by expecting the error:
//! - `sandbox.ReadFile` reads a file (`{"path": ..}`, default `/etc/passwd`);
//! - `sandbox.ReadEnv` reads an environment variable (`{"name": ..}`, default `HOME`);
//! - `sandbox.OpenSocket` connects over TCP (`{"addr": ..}`, default `127.0.0.1:5672`).

use std::net::TcpStream;

use jobhost_sdk::{Job, JobContext, JobError, Queues};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Queues)]
#[queues(prefix = "test")]
enum SandboxQueues {
    Sandbox,
}

/// Reads the file at `path`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "sandbox.ReadFile", queue = SandboxQueues::Sandbox)]
struct ReadFile {
    #[serde(default = "ReadFile::default_path")]
    path: String,
}

impl ReadFile {
    fn default_path() -> String {
        "/etc/passwd".to_owned()
    }
}

/// Reads the environment variable `name`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "sandbox.ReadEnv", queue = SandboxQueues::Sandbox)]
struct ReadEnv {
    #[serde(default = "ReadEnv::default_name")]
    name: String,
}

impl ReadEnv {
    fn default_name() -> String {
        "HOME".to_owned()
    }
}

/// Opens a TCP connection to `addr`.
#[derive(Debug, Serialize, Deserialize, Job)]
#[job(name = "sandbox.OpenSocket", queue = SandboxQueues::Sandbox)]
struct OpenSocket {
    #[serde(default = "OpenSocket::default_addr")]
    addr: String,
}

impl OpenSocket {
    fn default_addr() -> String {
        "127.0.0.1:5672".to_owned()
    }
}

fn read_file(job: ReadFile, ctx: &JobContext) -> Result<(), JobError> {
    let contents = std::fs::read(&job.path)
        .map_err(|e| JobError::retryable(format!("cannot read `{}`: {e}", job.path)))?;
    ctx.warn(&format!(
        "read {} bytes of `{}`: the sandbox leaks files",
        contents.len(),
        job.path
    ));
    Ok(())
}

fn read_env(job: ReadEnv, ctx: &JobContext) -> Result<(), JobError> {
    let value = std::env::var(&job.name)
        .map_err(|e| JobError::retryable(format!("cannot read env var `{}`: {e}", job.name)))?;
    ctx.warn(&format!(
        "read env var `{}` = `{value}`: the sandbox leaks the environment",
        job.name
    ));
    Ok(())
}

fn open_socket(job: OpenSocket, ctx: &JobContext) -> Result<(), JobError> {
    TcpStream::connect(&job.addr)
        .map_err(|e| JobError::retryable(format!("cannot connect to `{}`: {e}", job.addr)))?;
    ctx.warn(&format!(
        "connected to `{}`: the sandbox leaks the network",
        job.addr
    ));
    Ok(())
}

jobhost_sdk::plugin!(queues = SandboxQueues, jobs = {
    ReadFile => read_file,
    ReadEnv => read_env,
    OpenSocket => open_socket,
});
