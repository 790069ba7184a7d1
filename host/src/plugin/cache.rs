//! Compiled-artifact cache: a restart does not recompile unchanged plugins.
//!
//! An artifact is `{cache_dir}/{content-hash}-{engine-fingerprint}.cwasm`: the SHA-256 of
//! the plugin's bytes and a hash of the compiler settings (target, flags, wasmtime
//! version). A changed plugin or another engine configuration therefore never reads a
//! stale artifact; wasmtime also checks compatibility when deserializing, and a failed
//! read falls back to compiling. Files are written to a temporary name and renamed into
//! place, so a reader never sees a partial artifact.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use wasmtime::component::Component;

use super::engine::EngineInner;
use super::error::LoadError;

/// The component for `bytes`, from the cache when present, and whether it was compiled.
pub(super) fn compile_or_fetch(
    engine: &EngineInner,
    origin: &Path,
    content_hash: &str,
    bytes: &[u8],
) -> Result<(Component, bool), LoadError> {
    let artifact = engine
        .config
        .cache_dir
        .as_deref()
        .map(|dir| dir.join(format!("{content_hash}-{:016x}.cwasm", engine.fingerprint)));
    if let Some(artifact) = artifact.as_deref().filter(|artifact| artifact.is_file()) {
        match deserialize(&engine.wasmtime, artifact) {
            Ok(component) => return Ok((component, false)),
            Err(err) => tracing::warn!(
                artifact = %artifact.display(),
                "cannot read a cached compiled plugin, compiling it again: {err:#}"
            ),
        }
    }
    let component =
        Component::from_binary(&engine.wasmtime, bytes).map_err(|err| LoadError::Compile {
            path: origin.to_owned(),
            reason: format!("{err:#}"),
        })?;
    engine.compilations.fetch_add(1, Ordering::Relaxed);
    if let Some(artifact) = artifact {
        // A cache that cannot be written costs the next start a compile, not this load.
        if let Err(err) = store(&component, &artifact) {
            tracing::warn!(artifact = %artifact.display(), "cannot cache a compiled plugin: {err}");
        }
    }
    Ok((component, true))
}

/// Load an artifact this module wrote.
#[allow(unsafe_code)]
fn deserialize(engine: &wasmtime::Engine, artifact: &Path) -> wasmtime::Result<Component> {
    // SAFETY: `deserialize_file` trusts the file to be a wasmtime artifact that nobody
    // modifies while it is mapped. Only `store` writes into the cache directory: each
    // artifact is the `serialize` output of a component compiled by an engine with this
    // fingerprint, written to a fresh temporary file and renamed into place, so the file
    // is complete when it appears and is never written again (a rewrite replaces the
    // directory entry, not the mapped file). The name binds it to the plugin's content
    // hash and the engine's settings, and wasmtime re-checks the engine compatibility
    // header before using the code. The cache directory is the host's own, as trusted as
    // the plugin directory it mirrors.
    unsafe { Component::deserialize_file(engine, artifact) }
}

fn store(component: &Component, artifact: &Path) -> io::Result<()> {
    let serialized = component
        .serialize()
        .map_err(|err| io::Error::other(format!("{err:#}")))?;
    let mut temporary = PathBuf::from(artifact);
    temporary.set_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
    std::fs::write(&temporary, serialized)?;
    std::fs::rename(&temporary, artifact).inspect_err(|_| {
        // Best effort: a leftover temporary file is never read, only wasted space.
        let _ = std::fs::remove_file(&temporary);
    })
}
