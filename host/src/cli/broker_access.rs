//! The broker's credentials and TLS files, read from where the flags say.
//!
//! The password comes from `--amqp-password-file`, else `JOBHOST_AMQP_PASSWORD`, else
//! the URL, so it need not be in the process's arguments, which every user of the machine
//! can list. Files are read here, so an error names the flag's file.

use std::path::Path;

use anyhow::Context;
use jobhost::broker::RabbitMqOptions;
use jobhost::files::{self, Rules};
use jobhost::grants::HostSecrets;

use super::BrokerArgs;

/// Holds the broker password, as an alternative to the URL and the password file.
const PASSWORD_VARIABLE: &str = "JOBHOST_AMQP_PASSWORD";

/// Holds the broker's URL, which may carry the password.
const URL_VARIABLE: &str = "AMQP_URL";

/// What a credential or CA file of the broker must be.
const CREDENTIAL_FILE: Rules = Rules::capped(1024 * 1024, "a broker credential file may hold");

/// `options` with the password and TLS material `args` point to.
pub(super) fn broker_options(
    args: &BrokerArgs,
    mut options: RabbitMqOptions,
) -> anyhow::Result<RabbitMqOptions> {
    if let Some(password) = password(args)? {
        options = options.password(password);
    }
    if let Some(ca) = &args.amqp_ca_file {
        options = options.trust_certificates(read_text(ca, "--amqp-ca-file")?);
    }
    if let (Some(cert), Some(key)) = (&args.amqp_client_cert, &args.amqp_client_key) {
        options = options.client_certificate(
            read(cert, "--amqp-client-cert")?,
            read(key, "--amqp-client-key")?,
        );
    }
    Ok(options)
}

fn password(args: &BrokerArgs) -> anyhow::Result<Option<String>> {
    if let Some(file) = &args.amqp_password_file {
        let text = read_text(file, "--amqp-password-file")?;
        // Editors and `echo` end a file with a newline, which no password means.
        let password = text.strip_suffix('\n').unwrap_or(&text);
        let password = password.strip_suffix('\r').unwrap_or(password);
        return Ok(Some(password.to_owned()));
    }
    match std::env::var(PASSWORD_VARIABLE) {
        Ok(password) => Ok(Some(password)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("`{PASSWORD_VARIABLE}` is not valid UTF-8")
        }
    }
}

fn read(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    files::read(path, &CREDENTIAL_FILE)
        .with_context(|| format!("cannot read {flag} `{}`", path.display()))
}

/// The broker credentials of `args` a plugin secret may not name, added to `secrets`: the
/// password's variable and file, the URL's variable, the client key.
pub(super) fn refused_as_secrets(args: &BrokerArgs, mut secrets: HostSecrets) -> HostSecrets {
    secrets = secrets
        .variable(PASSWORD_VARIABLE, "the broker's password")
        .variable(
            URL_VARIABLE,
            "the broker's URL, which may hold its password",
        );
    if let Some(file) = &args.amqp_password_file {
        secrets = secrets.file(file, "the broker's password file");
    }
    if let Some(file) = &args.amqp_client_key {
        secrets = secrets.file(file, "the broker's client key");
    }
    secrets
}

fn read_text(path: &Path, flag: &str) -> anyhow::Result<String> {
    String::from_utf8(read(path, flag)?)
        .with_context(|| format!("{flag} `{}` is not UTF-8 text", path.display()))
}
