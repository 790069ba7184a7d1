//! Reading a file the host does not control: plugins, the grants file and what it names,
//! the demo's files, the broker's credential files, the admin token.
//!
//! Whoever may write the plugin directory (or a path the grants file names) chooses what
//! such a path is: a sparse file of gigabytes, a FIFO nobody writes, a device, a symbolic
//! link to any of them. Each is refused here, before a byte is read, and never blocks.
//!
//! # Contract
//! - **Regular files only.** The path is checked before it is opened (so a device is not
//!   opened at all), opened `O_NONBLOCK` (so a FIFO swapped in between cannot block the
//!   open), and the opened file is checked again with `fstat`: what is read is what was
//!   checked, whatever was renamed in between.
//! - **Symbolic links are followed, and the file they lead to is what is checked**; a
//!   refusal names the link's target.
//! - **Bounded.** A file larger than [`Rules::max_bytes`] is refused from its size, and the
//!   read itself stops one byte past the cap, because a size can lie (files in `/proc`
//!   report 0, a file can grow while it is read).
//! - **The operator's own**, for files that grant ([`Rules::operator_only`]): owned by the
//!   host's user and writable by nobody else.
//! - Every refusal is an [`io::Error`] whose message says the rule (`it is a FIFO, not a
//!   regular file`); callers name the file, as they do for any other read error.
//! - Blocking: call it from `spawn_blocking` or a plain thread, never on the async runtime,
//!   because even a regular file can be slow (a network file system).

use std::fs::File;
use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// What a file must be to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The most bytes the file may hold.
    pub max_bytes: u64,
    /// What the cap is, for the refusal: `"a plugin may hold (--max-plugin-size)"` reads
    /// "more than the 67108864 bytes a plugin may hold (--max-plugin-size)".
    pub limit: &'static str,
    /// Whether the file must belong to the host's user and be writable by no one else,
    /// as a file that grants must be.
    pub operator_only: bool,
}

impl Rules {
    /// A regular file of at most `max_bytes`, `limit` naming the cap in refusals.
    pub const fn capped(max_bytes: u64, limit: &'static str) -> Self {
        Self {
            max_bytes,
            limit,
            operator_only: false,
        }
    }

    /// The same rules, and the file must be the operator's own.
    pub const fn operator_only(self) -> Self {
        Self {
            operator_only: true,
            ..self
        }
    }
}

/// The bytes of the file at `path`, if it passes `rules`; see the module's contract.
pub fn read(path: &Path, rules: &Rules) -> io::Result<Vec<u8>> {
    // Checked before opening, so a device or socket is never opened; the same checks run
    // again on the opened file below.
    check(path, &std::fs::metadata(path)?, rules)?;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    check(path, &file.metadata()?, rules)?;
    let mut bytes = Vec::new();
    file.take(rules.max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > rules.max_bytes {
        return Err(refusal(
            path,
            io::ErrorKind::FileTooLarge,
            format!(
                "it holds more than the {} bytes {} (more than its size said)",
                rules.max_bytes, rules.limit
            ),
        ));
    }
    Ok(bytes)
}

/// Like [`read`], as UTF-8 text.
pub fn read_text(path: &Path, rules: &Rules) -> io::Result<String> {
    utf8(read(path, rules)?)
}

/// Like [`read`], on a blocking thread, for async code.
pub async fn read_async(path: &Path, rules: Rules) -> io::Result<Vec<u8>> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || read(&path, &rules))
        .await
        .unwrap_or_else(|err| Err(io::Error::other(err)))
}

/// `bytes` as text, or an error saying they are not.
pub fn utf8(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

/// Whether the file `meta` describes may be read under `rules`.
fn check(path: &Path, meta: &std::fs::Metadata, rules: &Rules) -> io::Result<()> {
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a plain file"
        };
        return Err(refusal(
            path,
            io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file; the host reads only regular files"),
        ));
    }
    if meta.size() > rules.max_bytes {
        return Err(refusal(
            path,
            io::ErrorKind::FileTooLarge,
            format!(
                "it holds {} bytes, more than the {} bytes {}",
                meta.size(),
                rules.max_bytes,
                rules.limit
            ),
        ));
    }
    if rules.operator_only {
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Err(refusal(
                path,
                io::ErrorKind::PermissionDenied,
                format!(
                    "it belongs to user {}, not to the host's user ({me}); a file that grants \
                     must be the operator's own",
                    meta.uid()
                ),
            ));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refusal(
                path,
                io::ErrorKind::PermissionDenied,
                format!(
                    "it is writable by group or others (mode {:04o}); a file that grants must \
                     be writable by its owner only (`chmod go-w`)",
                    meta.mode() & 0o7777
                ),
            ));
        }
    }
    Ok(())
}

/// A refusal saying `rule`, and the link's target when `path` is a symbolic link, since
/// the target is what broke the rule.
fn refusal(path: &Path, kind: io::ErrorKind, rule: String) -> io::Error {
    let through = std::fs::symlink_metadata(path)
        .is_ok_and(|meta| meta.file_type().is_symlink())
        .then(|| std::fs::canonicalize(path).or_else(|_| std::fs::read_link(path)))
        .and_then(Result::ok);
    match through {
        Some(target) => io::Error::new(kind, format!("it links to `{}`: {rule}", target.display())),
        None => io::Error::new(kind, rule),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const RULES: Rules = Rules::capped(16, "a test file may hold");

    fn fifo_in(dir: &Path) -> std::path::PathBuf {
        let fifo = dir.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .expect("a FIFO");
        fifo
    }

    #[test]
    fn a_regular_file_under_the_cap_is_read_whole() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("small");
        std::fs::write(&file, "sixteen bytes ok").expect("write");
        assert_eq!(read_text(&file, &RULES).expect("read"), "sixteen bytes ok");
    }

    #[test]
    fn a_fifo_is_refused_at_once_even_through_a_link() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let fifo = fifo_in(dir.path());
        let err = read(&fifo, &RULES).expect_err("a FIFO");
        assert_eq!(
            err.to_string(),
            "it is a FIFO, not a regular file; the host reads only regular files"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).expect("a link");
        let err = read(&link, &RULES).expect_err("a link to a FIFO");
        let target = std::fs::canonicalize(&fifo).expect("canonical");
        assert_eq!(
            err.to_string(),
            format!(
                "it links to `{}`: it is a FIFO, not a regular file; the host reads only \
                 regular files",
                target.display()
            )
        );
    }

    #[test]
    fn a_file_over_the_cap_is_refused_from_its_size_and_a_lying_size_by_the_read() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let sparse = dir.path().join("sparse");
        File::create(&sparse)
            .and_then(|file| file.set_len(8 << 30))
            .expect("a sparse file");
        let err = read(&sparse, &RULES).expect_err("too large");
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(
            err.to_string(),
            "it holds 8589934592 bytes, more than the 16 bytes a test file may hold"
        );
        // A regular file whose size says 0 while it holds far more than 16 bytes.
        let proc = Path::new("/proc/self/status");
        assert_eq!(std::fs::metadata(proc).expect("procfs").len(), 0);
        let err = read(proc, &RULES).expect_err("the read stops at the cap");
        assert!(err.to_string().contains("more than its size said"), "{err}");
    }

    #[test]
    fn a_file_that_grants_must_be_writable_by_its_owner_only() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("grants");
        std::fs::write(&file, "x").expect("write");
        let rules = RULES.operator_only();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(read(&file, &rules).is_ok());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        assert_eq!(
            read(&file, &rules).expect_err("open to others").to_string(),
            "it is writable by group or others (mode 0666); a file that grants must be \
             writable by its owner only (`chmod go-w`)"
        );
        assert!(
            read(&file, &RULES).is_ok(),
            "only files that grant need be the operator's own"
        );
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let err = read(dir.path(), &RULES).expect_err("a directory");
        assert!(err.to_string().starts_with("it is a directory"), "{err}");
    }
}
