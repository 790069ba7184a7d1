//! `jobhost dashboard`: a link that signs a browser in to the running host's dashboard.
//!
//! The host logs no credential, so the link comes from here: this command reads the host's
//! token file (only the host's user can), asks the host for a one-time login token
//! (`POST /api/login`) and prints `http://ADDR/?login=LOGIN` on stdout. With `--open` it
//! also opens it with `xdg-open`, through a redirect page in a `0600` file beside the
//! token file rather than on `xdg-open`'s command line, which every user of the machine
//! can read while it runs.

use std::path::Path;

use anyhow::{Context, bail};
use jobhost::admin::{AdminClient, LOGIN_LIFETIME, SESSION_LIFETIME};

use super::{DashboardArgs, paths};

/// `jobhost dashboard [--open]`.
pub(super) async fn run(args: DashboardArgs) -> anyhow::Result<()> {
    let file = paths::token_file(args.token.admin_token_file.as_deref(), &args.admin)?;
    let Some(token) = paths::read_token(&file)? else {
        bail!(
            "no admin token at `{}`: `jobhost run` writes it at start and removes it at exit; \
             start the host as this user, give `--admin` as the host was given it, or pass \
             `--admin-token-file` with the file the host logged",
            file.display()
        );
    };
    let link = AdminClient::new(&args.admin)
        .with_token(token)
        .login_link()
        .await?;
    println!("{link}");
    eprintln!(
        "the link signs one browser in within {} minutes; its session lasts {} hours",
        LOGIN_LIFETIME.as_secs() / 60,
        SESSION_LIFETIME.as_secs() / 3600
    );
    if args.open {
        open(&file.with_extension("html"), &link)?;
    }
    Ok(())
}

/// Open `link` with `xdg-open`, through a redirect page written to `page`.
fn open(page: &Path, link: &str) -> anyhow::Result<()> {
    let link = escape(link);
    let html = format!(
        "<!doctype html><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">\
         <meta http-equiv=\"refresh\" content=\"0;url={link}\"><a href=\"{link}\">jobhost dashboard</a>\n"
    );
    // The page holds a login token: the token file's writer gives it the same `0600`.
    paths::write_token(page, &html)?;
    let status = std::process::Command::new("xdg-open")
        .arg(page)
        .status()
        .context("cannot run `xdg-open`; open the link above in a browser")?;
    if !status.success() {
        bail!("`xdg-open` failed ({status}); open the link above in a browser");
    }
    Ok(())
}

/// `text` safe inside an HTML attribute.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}
