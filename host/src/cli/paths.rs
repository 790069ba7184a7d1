//! Where the host keeps what is its own: the grants file, the compiled-plugin cache and
//! the admin token.
//!
//! All live in the user's directories (XDG base directories), never in the plugin
//! directory, because whoever may drop a plugin there must not thereby reach native code,
//! the admin token, or the grants (and the secrets they name). The host and the client commands compute the same token path from
//! the admin address, so `jobhost enqueue` finds the token of the host it talks to.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use jobhost::files::{self, Rules};

/// `$XDG_CACHE_HOME/jobhost`, else `~/.cache/jobhost`.
pub(super) fn default_cache_dir() -> anyhow::Result<PathBuf> {
    base("XDG_CACHE_HOME", ".cache", "--cache-dir")
}

/// `$XDG_CONFIG_HOME/jobhost/jobhost.toml`, else `~/.config/jobhost/jobhost.toml`.
pub(super) fn default_grants_file() -> anyhow::Result<PathBuf> {
    Ok(base("XDG_CONFIG_HOME", ".config", "--config")?.join(jobhost::grants::FILE_NAME))
}

/// `$XDG_STATE_HOME/jobhost`, else `~/.local/state/jobhost`: the default token files.
pub(super) fn default_state_dir() -> anyhow::Result<PathBuf> {
    base("XDG_STATE_HOME", ".local/state", "--admin-token-file")
}

/// `$XDG_STATE_HOME/jobhost/admin-{addr}.token`, else under `~/.local/state/jobhost`, with
/// the address's characters other than letters, digits, `.` and `-` as `_`.
fn default_token_file(addr: &str) -> anyhow::Result<PathBuf> {
    let name: String = addr
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' => c,
            _ => '_',
        })
        .collect();
    Ok(default_state_dir()?.join(format!("admin-{name}.token")))
}

fn base(variable: &str, under_home: &str, flag: &str) -> anyhow::Result<PathBuf> {
    let absolute = |value: Option<std::ffi::OsString>| {
        value.map(PathBuf::from).filter(|path| path.is_absolute())
    };
    if let Some(dir) = absolute(std::env::var_os(variable)) {
        return Ok(dir.join("jobhost"));
    }
    match absolute(std::env::var_os("HOME")) {
        Some(home) => Ok(home.join(under_home).join("jobhost")),
        None => bail!("neither `{variable}` nor `HOME` is set to an absolute path: pass `{flag}`"),
    }
}

/// `chosen` (`--admin-token-file`), else the default token file of the API at `addr`.
pub(super) fn token_file(chosen: Option<&Path>, addr: &str) -> anyhow::Result<PathBuf> {
    match chosen {
        Some(path) => Ok(path.to_owned()),
        None => default_token_file(addr),
    }
}

/// Write `token` to `path` (`0600`, its directory created `0700`), replacing what is there.
pub(super) fn write_token(path: &Path, token: &str) -> anyhow::Result<()> {
    let context = || format!("cannot write the admin token file `{}`", path.display());
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(context)?;
    }
    let temporary = path.with_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut file| file.write_all(token.as_bytes()))
        // A rename replaces the entry itself, so a symbolic link planted at `path` is
        // replaced rather than written through.
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.with_context(context)
}

/// The token in `path`, or `None` when there is no such file (a host that has not
/// started, or runs elsewhere); a mutating request then fails with the host's 401.
pub(super) fn read_token(path: &Path) -> anyhow::Result<Option<String>> {
    const TOKEN_FILE: Rules = Rules::capped(4096, "a token file may hold");
    match files::read_text(path, &TOKEN_FILE) {
        Ok(token) => Ok(Some(token.trim().to_owned())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err)
            .with_context(|| format!("cannot read the admin token file `{}`", path.display())),
    }
}
