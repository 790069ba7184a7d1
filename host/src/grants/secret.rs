//! A secret value that no log line, error or `Debug` output can show, and the host's own
//! credentials, which no plugin secret may be read from.

use std::fmt;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// A secret's value. `Debug` and `Display` print `<redacted>`; only [`Secret::expose`]
/// gives the value, to the plugin that asks for it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap `value`.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The value, for the guest that reads it; never for a log or a page.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a secret's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable of the host, by name.
    Env(String),
    /// A file, as the configuration names it (relative to the configuration file).
    File(String),
}

impl SecretSource {
    /// `env` or `file`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Env(_) => "env",
            Self::File(_) => "file",
        }
    }

    /// The variable's name or the file's path.
    pub fn name(&self) -> &str {
        match self {
            Self::Env(name) | Self::File(name) => name,
        }
    }
}

/// The host's own credentials: files, directories and environment variables that no
/// secret of the grants file may name, so that whoever may edit the grants file cannot
/// hand a plugin the admin token or the broker's password.
///
/// A file is matched by its canonical path and by its identity (device and inode), so
/// neither a symbolic nor a hard link to it passes; a directory by its canonical path,
/// everything under it included.
#[derive(Debug, Clone, Default)]
pub struct HostSecrets {
    files: Vec<(PathBuf, &'static str)>,
    dirs: Vec<(PathBuf, &'static str)>,
    variables: Vec<(String, &'static str)>,
}

impl HostSecrets {
    /// Also refuse the file at `path`, which is `what` (e.g. "the admin token file").
    pub fn file(mut self, path: impl Into<PathBuf>, what: &'static str) -> Self {
        self.files.push((path.into(), what));
        self
    }

    /// Also refuse every file under `dir`, which is `what` (e.g. "the host's cache").
    pub fn dir(mut self, dir: impl Into<PathBuf>, what: &'static str) -> Self {
        self.dirs.push((dir.into(), what));
        self
    }

    /// Also refuse the environment variable `name`, which holds `what`.
    pub fn variable(mut self, name: impl Into<String>, what: &'static str) -> Self {
        self.variables.push((name.into(), what));
        self
    }

    /// Whether a secret may be read from the variable `name`; the error says why not.
    pub(super) fn check_variable(&self, name: &str) -> Result<(), String> {
        match self.variables.iter().find(|(refused, _)| refused == name) {
            Some((_, what)) => Err(refused(what)),
            None => Ok(()),
        }
    }

    /// Whether a secret may be read from the file at `path`; the error says why not. A
    /// file that cannot be resolved passes here and fails when it is read.
    pub(super) fn check_file(&self, path: &Path) -> Result<(), String> {
        let Ok(canonical) = std::fs::canonicalize(path) else {
            return Ok(());
        };
        let identity = |path: &Path| {
            std::fs::metadata(path)
                .ok()
                .map(|meta| (meta.dev(), meta.ino()))
        };
        let own = identity(&canonical);
        for (file, what) in &self.files {
            let same_path = std::fs::canonicalize(file).is_ok_and(|file| file == canonical);
            if same_path || (own.is_some() && identity(file) == own) {
                return Err(refused(what));
            }
        }
        for (dir, what) in &self.dirs {
            let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            if canonical.starts_with(&dir) {
                return Err(refused(what));
            }
        }
        Ok(())
    }
}

fn refused(what: &str) -> String {
    format!("it is {what}; a plugin may not be given the host's own credentials")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_prints_as_redacted_however_it_is_formatted() {
        let secret = Secret::new("hunter2".to_owned());
        assert_eq!(format!("{secret:?}"), "<redacted>");
        assert_eq!(format!("{secret}"), "<redacted>");
        assert_eq!(format!("{:?}", Some(&secret)), "Some(<redacted>)");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn the_host_credentials_are_refused_by_path_link_hard_link_and_directory() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let token = dir.path().join("admin.token");
        std::fs::write(&token, "t").expect("write");
        let state = dir.path().join("state");
        std::fs::create_dir(&state).expect("mkdir");
        std::fs::write(state.join("other"), "o").expect("write");
        let secrets = HostSecrets::default()
            .file(&token, "the admin token file")
            .dir(&state, "the host's state directory")
            .variable("JOBHOST_AMQP_PASSWORD", "the broker's password");
        let soft = dir.path().join("soft");
        std::os::unix::fs::symlink(&token, &soft).expect("a link");
        let hard = dir.path().join("hard");
        std::fs::hard_link(&token, &hard).expect("a hard link");
        for path in [&token, &soft, &hard] {
            assert_eq!(
                secrets.check_file(path),
                Err(
                    "it is the admin token file; a plugin may not be given the host's own \
                     credentials"
                        .to_owned()
                ),
                "{}",
                path.display()
            );
        }
        let err = secrets
            .check_file(&state.join("../state/other"))
            .expect_err("under the state directory");
        assert!(
            err.starts_with("it is the host's state directory;"),
            "{err}"
        );
        let err = secrets
            .check_variable("JOBHOST_AMQP_PASSWORD")
            .expect_err("the broker's password");
        assert!(err.starts_with("it is the broker's password;"), "{err}");

        let fine = dir.path().join("plugin.key");
        std::fs::write(&fine, "k").expect("write");
        assert_eq!(secrets.check_file(&fine), Ok(()));
        assert_eq!(secrets.check_variable("WEBHOOK_KEY"), Ok(()));
    }
}
