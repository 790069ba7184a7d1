//! Every cause is printed once. The CLI prints an error as `{err:#}`: its message, then the
//! message of each `source()`. An error that writes its cause into its own message must
//! therefore not also return it from `source()`, or the CLI prints
//! `...: Permission denied (os error 13): Permission denied (os error 13)`.

use std::path::PathBuf;

use jobhost::app::HostError;
use jobhost::envelope::Envelope;
use jobhost::plugin::{EngineError, LoadError};
use jobhost::producer::ProduceError;
use jobhost::reload::ReloadError;
use jobhost::worker::RegistryError;

/// `err` as the CLI prints it.
fn printed(err: impl std::error::Error + Send + Sync + 'static) -> String {
    format!("{:#}", anyhow::Error::new(err))
}

fn serde_error() -> serde_json::Error {
    serde_json::from_str::<u8>("x").expect_err("`x` is no number")
}

#[test]
fn an_unreadable_plugin_directory_names_its_cause_once() {
    let err = HostError::PluginDir {
        path: PathBuf::from("plugins"),
        cause: std::io::Error::from_raw_os_error(13),
    };
    assert_eq!(
        printed(err),
        "cannot read the plugin directory `plugins`: Permission denied (os error 13)"
    );
}

#[test]
fn a_cache_directory_that_cannot_be_created_names_its_cause_once() {
    let err = HostError::Engine(EngineError::CacheDir {
        path: PathBuf::from("/var/cache/jobhost"),
        cause: std::io::Error::from_raw_os_error(13),
    });
    assert_eq!(
        printed(err),
        "cannot use the compiled-plugin cache `/var/cache/jobhost`: Permission denied \
         (os error 13)"
    );
}

#[test]
fn a_malformed_envelope_names_serdes_message_once() {
    let err = Envelope::decode(b"x").expect_err("not an envelope");
    assert_eq!(
        printed(err),
        "malformed envelope: expected value at line 1 column 1"
    );
}

#[test]
fn a_job_that_does_not_serialize_names_serdes_message_once() {
    let err = ProduceError::Serialize {
        job_type: "t.Job",
        cause: serde_error(),
    };
    assert_eq!(
        printed(err),
        "job `t.Job` does not serialize to JSON: expected value at line 1 column 1"
    );
}

#[test]
fn a_conflicting_plugin_names_the_conflict_once() {
    let err = ReloadError::Conflict {
        path: PathBuf::from("b.wasm"),
        conflict: RegistryError::JobClaimed {
            job: "t.Job".to_owned(),
            new: "b".to_owned(),
            existing: "a".to_owned(),
        },
    };
    assert_eq!(
        printed(err),
        "refused `b.wasm`: plugin b claims job type `t.Job`, already served by plugin a"
    );
}

#[test]
fn an_unreadable_plugin_file_names_its_cause_once() {
    let err = ReloadError::Load(LoadError::Read {
        path: PathBuf::from("plugins/a.wasm"),
        cause: std::io::Error::from_raw_os_error(13),
    });
    assert_eq!(
        printed(err),
        "cannot read plugin `plugins/a.wasm`: Permission denied (os error 13)"
    );
}
