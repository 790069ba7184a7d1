//! A secret value that no log line, error or `Debug` output can show.

use std::fmt;

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
}
