//! Compiled-artifact cache: a restart does not recompile unchanged plugins, and nothing
//! but this host's own compiler output is ever deserialized.
//!
//! # Contract
//! - An entry is `{dir}/{content-hash}-{engine-fingerprint}.cwasm`: the SHA-256 of the
//!   plugin's bytes and a hash of the compiler settings, so a changed plugin or another
//!   engine configuration never reads a stale entry.
//! - **Every entry is authenticated before it is deserialized.** A cache entry is native
//!   code that runs without validation, so anyone who can write one could run anything in
//!   the host. An entry is `tag || artifact`, where `tag` is HMAC-SHA256 under the cache's
//!   key of the entry's name and the artifact: an entry forged without the key, or moved
//!   to another plugin's name, fails verification. The entry is read into memory once and
//!   the verified bytes are the ones deserialized, so a concurrent rewrite cannot slip in.
//! - The key is 32 random bytes in `{dir}/cache.key`, created on first use, mode `0600`.
//! - The directory belongs to the host's user and is `0700` (created so). One open to
//!   other users is closed and its key replaced, since the old key may have been read or
//!   swapped; one that belongs to another user, or is a symbolic link, is refused.
//! - A symbolic link in place of an entry or of the key is refused, never followed.
//! - An entry that fails any check is logged, the plugin compiled again from its `.wasm`,
//!   and the entry replaced. Entries are written to a temporary name and renamed into
//!   place, so a reader never sees a partial one.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use hmac::{Hmac, Mac};
use rustix::fs::OFlags;
use sha2::Sha256;
use wasmtime::component::Component;

use super::engine::EngineInner;
use super::error::{EngineError, LoadError};

/// The key file's name inside the cache directory.
const KEY_FILE: &str = "cache.key";
/// Bytes of the key and of each entry's tag.
const KEY_LEN: usize = 32;
/// Binds a tag to this use and format, so no other HMAC under the key can pass for it.
const DOMAIN: &[u8] = b"jobhost compiled plugin v1\0";

type Tag = Hmac<Sha256>;

/// An open cache directory and its key.
pub(super) struct ArtifactCache {
    dir: PathBuf,
    key: [u8; KEY_LEN],
}

impl ArtifactCache {
    /// Open the cache at `dir`, creating it (`0700`) and its key as needed.
    pub(super) fn open(dir: &Path) -> Result<Self, EngineError> {
        let refused = |cause: io::Error| EngineError::CacheDir {
            path: dir.to_owned(),
            cause,
        };
        let was_open = secure_dir(dir).map_err(refused)?;
        let key_path = dir.join(KEY_FILE);
        if was_open {
            tracing::warn!(dir = %dir.display(), "the compiled-plugin cache was open to other users: closed it (0700) and replaced its key, so every entry compiles again");
            remove_if_present(&key_path).map_err(refused)?;
        }
        let key = load_or_create_key(&key_path).map_err(refused)?;
        Ok(Self {
            dir: dir.to_owned(),
            key,
        })
    }

    fn tag(&self, name: &str, artifact: &[u8]) -> Tag {
        let mut tag = Tag::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        tag.update(DOMAIN);
        tag.update(name.as_bytes());
        tag.update(b"\0");
        tag.update(artifact);
        tag
    }

    /// The verified artifact of entry `name`, or why there is none.
    fn fetch(&self, name: &str) -> Result<Vec<u8>, Miss> {
        let mut entry = open_no_follow(&self.dir.join(name)).map_err(Miss::from_open)?;
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).map_err(Miss::Unreadable)?;
        if bytes.len() < KEY_LEN {
            return Err(Miss::Forged);
        }
        let artifact = bytes.split_off(KEY_LEN);
        self.tag(name, &artifact)
            .verify_slice(&bytes)
            .map_err(|_| Miss::Forged)?;
        Ok(artifact)
    }

    fn store(&self, name: &str, component: &Component) -> io::Result<()> {
        let artifact = component
            .serialize()
            .map_err(|err| io::Error::other(format!("{err:#}")))?;
        let tag = self.tag(name, &artifact).finalize().into_bytes();
        let entry = self.dir.join(name);
        let temporary = self
            .dir
            .join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
        let written = write_new(&temporary, &[&tag, &artifact])
            // `rename` replaces a symbolic link itself, never the file it points to.
            .and_then(|()| fs::rename(&temporary, &entry));
        if written.is_err() {
            // Best effort: a leftover temporary file is never read, only wasted space.
            let _ = fs::remove_file(&temporary);
        }
        written
    }
}

/// Why an entry is not used.
#[derive(Debug)]
enum Miss {
    /// No entry yet: the normal first load.
    Absent,
    /// A symbolic link stands where the entry should be.
    Symlink,
    /// The entry's tag does not match: not written by this cache, or altered since.
    Forged,
    /// The entry exists but cannot be read.
    Unreadable(io::Error),
}

impl Miss {
    fn from_open(err: io::Error) -> Self {
        match err.kind() {
            io::ErrorKind::NotFound => Self::Absent,
            // `O_NOFOLLOW` on a symbolic link fails with `ELOOP`.
            _ if err.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
                Self::Symlink
            }
            _ => Self::Unreadable(err),
        }
    }
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Absent => f.write_str("no entry"),
            Self::Symlink => f.write_str("the entry is a symbolic link, which is never followed"),
            Self::Forged => {
                f.write_str("the entry fails authentication: this host did not write it")
            }
            Self::Unreadable(err) => write!(f, "the entry cannot be read: {err}"),
        }
    }
}

/// The component for `bytes`, from the cache when an authentic entry is there, and
/// whether it was compiled.
pub(super) fn compile_or_fetch(
    engine: &EngineInner,
    origin: &Path,
    content_hash: &str,
    bytes: &[u8],
) -> Result<(Component, bool), LoadError> {
    let name = format!("{content_hash}-{:016x}.cwasm", engine.fingerprint);
    if let Some(cache) = &engine.cache {
        match cache.fetch(&name) {
            Ok(artifact) => match deserialize(&engine.wasmtime, &artifact) {
                Ok(component) => return Ok((component, false)),
                Err(err) => {
                    tracing::warn!(entry = %name, plugin = %origin.display(), "cannot load a cached compiled plugin, compiling it again: {err:#}")
                }
            },
            Err(Miss::Absent) => {}
            Err(miss) => {
                tracing::warn!(entry = %name, dir = %cache.dir.display(), plugin = %origin.display(), "refusing a compiled-plugin cache entry, compiling the plugin again: {miss}");
            }
        }
    }
    let component =
        Component::from_binary(&engine.wasmtime, bytes).map_err(|err| LoadError::Compile {
            path: origin.to_owned(),
            reason: format!("{err:#}"),
        })?;
    engine.compilations.fetch_add(1, Ordering::Relaxed);
    if let Some(cache) = &engine.cache {
        // A cache that cannot be written costs the next start a compile, not this load.
        if let Err(err) = cache.store(&name, &component) {
            tracing::warn!(entry = %name, dir = %cache.dir.display(), "cannot cache a compiled plugin: {err}");
        }
    }
    Ok((component, true))
}

/// Load an artifact that [`ArtifactCache::fetch`] verified.
#[allow(unsafe_code)]
fn deserialize(engine: &wasmtime::Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `deserialize` trusts its input to be the `serialize` output of a compatible
    // engine. These bytes carry a valid HMAC under the cache's key, which only this host's
    // user can read, over the entry's name (plugin hash and engine fingerprint) and the
    // bytes themselves: they are exactly what `ArtifactCache::store` wrote for this plugin
    // and engine. They are in memory, so nothing can change them after verification, and
    // wasmtime re-checks the engine compatibility header before using the code.
    unsafe { Component::deserialize(engine, artifact) }
}

/// Create `dir` as `0700` or check the one there: a directory, not a symbolic link,
/// owned by this user. Returns whether it was open to other users (and is now closed).
fn secure_dir(dir: &Path) -> io::Result<bool> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(io::Error::other(
            "it is not a directory (a symbolic link is refused): choose another with `--cache-dir`",
        ));
    }
    check_owner(&meta)?;
    if meta.mode() & 0o077 == 0 {
        return Ok(false);
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    Ok(true)
}

fn check_owner(meta: &fs::Metadata) -> io::Result<()> {
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() == me {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "it belongs to user {}, not to this user ({me}), who must own what it runs: choose another with `--cache-dir`",
        meta.uid()
    )))
}

/// The key at `path`, replacing one that is not this user's private 32-byte file.
fn load_or_create_key(path: &Path) -> io::Result<[u8; KEY_LEN]> {
    match read_key(path) {
        Ok(key) => return Ok(key),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(key = %path.display(), "replacing the compiled-plugin cache key, so every entry compiles again: {err}");
            remove_if_present(path)?;
        }
    }
    let key: [u8; KEY_LEN] = rand::random();
    let temporary = path.with_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
    write_new(&temporary, &[&key])?;
    // `hard_link` publishes the complete file and fails if another host got there first;
    // then both use that one.
    let linked = fs::hard_link(&temporary, path);
    fs::remove_file(&temporary)?;
    match linked {
        Ok(()) => Ok(key),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => read_key(path),
        Err(err) => Err(err),
    }
}

fn read_key(path: &Path) -> io::Result<[u8; KEY_LEN]> {
    let mut file = open_no_follow(path)?;
    let meta = file.metadata()?;
    check_owner(&meta)?;
    if !meta.is_file() || meta.mode() & 0o077 != 0 {
        return Err(io::Error::other(
            "the key is not a private file (0600) of this user",
        ));
    }
    let mut key = [0; KEY_LEN];
    file.read_exact(&mut key)?;
    if file.read(&mut [0])? != 0 {
        return Err(io::Error::other("the key is longer than 32 bytes"));
    }
    Ok(key)
}

fn open_no_follow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Write `parts` to a new file at `path`, private to this user.
fn write_new(path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    for part in parts {
        file.write_all(part)?;
    }
    file.sync_all()
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}
