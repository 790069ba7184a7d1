//! `wasi:config/store`: a plugin reads its config values and secrets.
//!
//! Linked by hand, like the `host` interface, so the key is read in guest memory: a key
//! longer than [`KEY_MAX`] cannot name anything and is answered `none` without a copy, and
//! each call is charged to the job's host-call budget. Values come from the plugin's
//! section of the grants file as it was when the job started: the section its file names
//! (never its manifest's name), none when the section pins another binary. Config values
//! and secrets share one key space, and an unknown key is `none`. Nothing here logs a
//! value.

use wasmtime::StoreContextMut;
use wasmtime::component::{ComponentType, Linker, Lower, WasmStr};

use super::host_api;
use super::store::JobState;

/// The interface's name and version as guests import it.
pub(super) const INTERFACE: &str = "wasi:config/store@0.2.0-rc.1";

/// The longest key looked up; no key in a grants file is this long.
const KEY_MAX: usize = 1024;

/// `wasi:config/store.error`. This host never fails a lookup, but the type is part of the
/// functions' signatures, which are checked when a guest is linked.
#[derive(ComponentType, Lower)]
#[component(variant)]
enum ConfigError {
    #[component(name = "upstream")]
    #[expect(dead_code, reason = "never returned; part of the interface's type")]
    Upstream(String),
    #[component(name = "io")]
    #[expect(dead_code, reason = "never returned; part of the interface's type")]
    Io(String),
}

type Store<'a> = StoreContextMut<'a, JobState>;

/// Define `get` and `get-all` in `linker`.
pub(super) fn add_to_linker(linker: &mut Linker<JobState>) -> wasmtime::Result<()> {
    let mut store = linker.instance(INTERFACE)?;
    store.func_wrap("get", |store, (key,): (WasmStr,)| {
        get(store, &key).map(|value| (Ok::<_, ConfigError>(value),))
    })?;
    store.func_wrap("get-all", |store, (): ()| {
        get_all(store).map(|values| (Ok::<_, ConfigError>(values),))
    })?;
    Ok(())
}

fn get(mut store: Store<'_>, key: &WasmStr) -> wasmtime::Result<Option<String>> {
    host_api::call(&mut store)?;
    let key = key.to_str(&store)?;
    if key.len() > KEY_MAX {
        return Ok(None);
    }
    let state = store.data();
    let lookup = || {
        let grants = state.grants.plugin_grants()?;
        let value = grants.value(&key)?.to_owned();
        Some((value, grants.is_secret(&key)))
    };
    match &state.tape {
        Some(tape) => tape.config(&key, lookup),
        None => Ok(lookup().map(|(value, _)| value)),
    }
}

fn get_all(mut store: Store<'_>) -> wasmtime::Result<Vec<(String, String)>> {
    host_api::call(&mut store)?;
    let state = store.data();
    let lookup = || {
        let Some(grants) = state.grants.plugin_grants() else {
            return Vec::new();
        };
        (grants.values.keys())
            .filter_map(|key| {
                let value = grants.value(key)?.to_owned();
                Some((key.clone(), value, grants.is_secret(key)))
            })
            .collect()
    };
    match &state.tape {
        Some(tape) => tape.config_all(lookup),
        None => Ok(lookup()
            .into_iter()
            .map(|(key, value, _)| (key, value))
            .collect()),
    }
}
