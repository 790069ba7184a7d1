//! What a job may hold on the host through `wasi:http`, charged before it is copied.
//!
//! wasmtime-wasi-http keeps what a guest hands its constructors and setters in host memory
//! for as long as the guest keeps the resource: a method of any length, header maps of up
//! to 128 KiB each, request bodies buffered until they are sent, in a resource table that
//! admits a million entries. So the functions that take guest data are linked again over
//! wasmtime-wasi-http's own (linker shadowing), read their arguments in guest memory,
//! charge them to the job's [`HostCallBudget`], and only then copy them and call the
//! original.
//!
//! # Contract
//! - Each call to a `wasi:http` constructor or setter is one host call of
//!   [`HostCallBudget::calls`]: `fields` (`new`, `from-list`, `set`, `append`, `clone`),
//!   `outgoing-request` (`new`, `set-method`, `set-scheme`, `set-authority`,
//!   `set-path-with-query`, `body`), `outgoing-body.write`, `request-options` (`new`) and
//!   `outgoing-handler.handle`.
//! - Each request part is measured before it is copied and may be at most
//!   [`HttpPart::max`] bytes: a method 64, a scheme 32, an authority 1 KiB, a path with
//!   query 16 KiB, a header name 256, a header value 16 KiB.
//! - The parts a job hands over, each with [`HTTP_PART_OVERHEAD`] bytes more, and the
//!   header maps it clones, add up against [`HostCallBudget::http_bytes`] (16 MiB).
//! - A job holds at most [`HostCallBudget::resources`] resources at once (1,024: its
//!   resource table, shared with WASI's streams and pollables), and an outgoing body
//!   buffers at most two writes of [`BODY_CHUNK`] bytes until its request takes them.
//! - Overrunning any of these traps the guest: the attempt crashes with a reason naming
//!   the budget (`host-call budget exceeded: more than 1024 resources held at once`), as
//!   for the other host-call budgets (see [`budget`](super::super::budget)).
//!
//! So what a job's `wasi:http` resources hold on the host is at most `http_bytes` of parts
//! and headers, plus per resource two body chunks and its own bookkeeping: with the
//! defaults, about 16 MiB + 1,024 × 17 KiB ≈ 33 MiB, whatever the guest does. Responses
//! are bounded by the grants (`max_concurrent_requests` in flight, each body read through
//! its cap). A stream write larger than the permit `check-write` gave traps after
//! wasmtime-wasi lifted it; that passing copy is bounded by the guest's memory cap, as
//! the bytes lie in guest memory.
//!
//! The shadowed functions are defined in `wasi:http/types@0.2.12` and
//! `wasi:http/outgoing-handler@0.2.12`, the version wasmtime-wasi-http defines (guests of
//! older 0.2 versions are linked to it by semver); a wasmtime-wasi-http of another version
//! must be matched here, which the flood tests of `plugin_budgets.rs` would show.

use wasmtime::StoreContextMut;
use wasmtime::component::{
    ComponentType, Lift, Linker, LinkerInstance, Resource, WasmList, WasmStr,
};
use wasmtime_wasi::p2::DynOutputStream;
use wasmtime_wasi_http::p2::bindings::http::{outgoing_handler, types};
use wasmtime_wasi_http::p2::{HeaderError, HttpError};
use wasmtime_wasi_http::{FieldMap, WasiHttpView};

#[cfg(doc)]
use super::super::budget::HostCallBudget;
use super::super::budget::{HTTP_PART_OVERHEAD, HttpPart};
use super::super::host_api;
use super::super::store::JobState;

/// The most bytes of one write to an outgoing body (the permit `check-write` gives); a
/// body buffers two of them until its request takes them. 8 KiB, twice what a WASI
/// `blocking-write-and-flush` writes at once.
pub(super) const BODY_CHUNK: usize = 8 * 1024;

const TYPES: &str = "wasi:http/types@0.2.12";
const HANDLER: &str = "wasi:http/outgoing-handler@0.2.12";

type Store<'a> = StoreContextMut<'a, JobState>;

/// `wasi:http/types.method`, its `other` case still in guest memory.
#[derive(ComponentType, Lift)]
#[component(variant)]
enum Method {
    #[component(name = "get")]
    Get,
    #[component(name = "head")]
    Head,
    #[component(name = "post")]
    Post,
    #[component(name = "put")]
    Put,
    #[component(name = "delete")]
    Delete,
    #[component(name = "connect")]
    Connect,
    #[component(name = "options")]
    Options,
    #[component(name = "trace")]
    Trace,
    #[component(name = "patch")]
    Patch,
    #[component(name = "other")]
    Other(WasmStr),
}

/// `wasi:http/types.scheme`, its `other` case still in guest memory.
#[derive(ComponentType, Lift)]
#[component(variant)]
enum Scheme {
    #[component(name = "HTTP")]
    Http,
    #[component(name = "HTTPS")]
    Https,
    #[component(name = "other")]
    Other(WasmStr),
}

/// Link the budgeted functions over wasmtime-wasi-http's, which must be linked already.
pub(in crate::plugin) fn add_to_linker(linker: &mut Linker<JobState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = shadow(linker);
    linker.allow_shadowing(false);
    linked
}

fn shadow(linker: &mut Linker<JobState>) -> wasmtime::Result<()> {
    let mut types = linker.instance(TYPES)?;
    shadow_fields(&mut types)?;
    shadow_field_setters(&mut types)?;
    shadow_request(&mut types)?;
    shadow_request_parts(&mut types)?;
    types.func_wrap(
        "[constructor]request-options",
        |mut store: Store<'_>, (): ()| {
            host_api::call(&mut store)?;
            let mut http = store.data_mut().http();
            Ok((types::HostRequestOptions::new(&mut http)?,))
        },
    )?;
    let mut handler = linker.instance(HANDLER)?;
    handler.func_wrap(
        "handle",
        |mut store: Store<'_>,
         (request, options): (
            Resource<types::OutgoingRequest>,
            Option<Resource<types::RequestOptions>>,
        )| {
            host_api::call(&mut store)?;
            let mut http = store.data_mut().http();
            let handled = outgoing_handler::Host::handle(&mut http, request, options);
            Ok((http_result(handled)?,))
        },
    )?;
    Ok(())
}

/// The `fields` constructors: header names and values, charged as they come.
fn shadow_fields(types: &mut LinkerInstance<'_, JobState>) -> wasmtime::Result<()> {
    types.func_wrap("[constructor]fields", |mut store: Store<'_>, (): ()| {
        host_api::call(&mut store)?;
        let mut http = store.data_mut().http();
        Ok((types::HostFields::new(&mut http)?,))
    })?;
    types.func_wrap(
        "[static]fields.from-list",
        |mut store: Store<'_>, (entries,): (WasmList<(WasmStr, WasmList<u8>)>,)| {
            host_api::call(&mut store)?;
            for index in 0..entries.len() {
                let (name, value) = nth(&entries, &mut store, index)?;
                let name_len = name.to_str(&store)?.len();
                charge(&mut store, HttpPart::HeaderName, name_len)?;
                charge(&mut store, HttpPart::HeaderValue, value.len())?;
            }
            let mut owned = Vec::with_capacity(entries.len());
            for index in 0..entries.len() {
                let (name, value) = nth(&entries, &mut store, index)?;
                owned.push((
                    name.to_str(&store)?.into_owned(),
                    value.as_le_slice(&store).to_vec(),
                ));
            }
            let mut http = store.data_mut().http();
            Ok((header_result(types::HostFields::from_list(
                &mut http, owned,
            ))?,))
        },
    )?;
    Ok(())
}

/// The `fields` setters, charged as they come, and `clone`, which shares a map until it
/// changes and then copies it whole.
fn shadow_field_setters(types: &mut LinkerInstance<'_, JobState>) -> wasmtime::Result<()> {
    types.func_wrap(
        "[method]fields.set",
        |mut store: Store<'_>,
         (fields, name, values): (Resource<FieldMap>, WasmStr, WasmList<WasmList<u8>>)| {
            host_api::call(&mut store)?;
            let name_len = name.to_str(&store)?.len();
            charge(&mut store, HttpPart::HeaderName, name_len)?;
            for index in 0..values.len() {
                let value = nth(&values, &mut store, index)?;
                charge(&mut store, HttpPart::HeaderValue, value.len())?;
            }
            let name = name.to_str(&store)?.into_owned();
            let mut owned = Vec::with_capacity(values.len());
            for index in 0..values.len() {
                owned.push(
                    nth(&values, &mut store, index)?
                        .as_le_slice(&store)
                        .to_vec(),
                );
            }
            let mut http = store.data_mut().http();
            let set = types::HostFields::set(&mut http, fields, name, owned);
            Ok((header_result(set)?,))
        },
    )?;
    types.func_wrap(
        "[method]fields.append",
        |mut store: Store<'_>,
         (fields, name, value): (Resource<FieldMap>, WasmStr, WasmList<u8>)| {
            host_api::call(&mut store)?;
            let name_len = name.to_str(&store)?.len();
            charge(&mut store, HttpPart::HeaderName, name_len)?;
            charge(&mut store, HttpPart::HeaderValue, value.len())?;
            let name = name.to_str(&store)?.into_owned();
            let value = value.as_le_slice(&store).to_vec();
            let mut http = store.data_mut().http();
            let appended = types::HostFields::append(&mut http, fields, name, value);
            Ok((header_result(appended)?,))
        },
    )?;
    types.func_wrap(
        "[method]fields.clone",
        |mut store: Store<'_>, (fields,): (Resource<FieldMap>,)| {
            host_api::call(&mut store)?;
            // A clone shares the map until it is changed, and a change copies it whole.
            let size = held(store.data_mut().http().table.get(&fields)?);
            let state = store.data_mut();
            if let Err(exceeded) = state.spent.http_bytes(size) {
                return Err(state.spent.overrun(exceeded));
            }
            let mut http = store.data_mut().http();
            Ok((types::HostFields::clone(&mut http, fields)?,))
        },
    )?;
    Ok(())
}

/// The `outgoing-request` constructor and its method and scheme setters.
fn shadow_request(types: &mut LinkerInstance<'_, JobState>) -> wasmtime::Result<()> {
    types.func_wrap(
        "[constructor]outgoing-request",
        |mut store: Store<'_>, (headers,): (Resource<FieldMap>,)| {
            host_api::call(&mut store)?;
            let mut http = store.data_mut().http();
            Ok((types::HostOutgoingRequest::new(&mut http, headers)?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-method",
        |mut store: Store<'_>, (request, method): (Resource<types::OutgoingRequest>, Method)| {
            host_api::call(&mut store)?;
            let method = owned_method(&mut store, method)?;
            let mut http = store.data_mut().http();
            Ok((types::HostOutgoingRequest::set_method(
                &mut http, request, method,
            )?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-scheme",
        |mut store: Store<'_>,
         (request, scheme): (Resource<types::OutgoingRequest>, Option<Scheme>)| {
            host_api::call(&mut store)?;
            let scheme = match scheme {
                None => None,
                Some(Scheme::Http) => Some(types::Scheme::Http),
                Some(Scheme::Https) => Some(types::Scheme::Https),
                Some(Scheme::Other(other)) => Some(types::Scheme::Other(copy(
                    &mut store,
                    HttpPart::Scheme,
                    &other,
                )?)),
            };
            let mut http = store.data_mut().http();
            Ok((types::HostOutgoingRequest::set_scheme(
                &mut http, request, scheme,
            )?,))
        },
    )?;
    Ok(())
}

/// The `outgoing-request` setters of its authority and path, and the writes of its body.
fn shadow_request_parts(types: &mut LinkerInstance<'_, JobState>) -> wasmtime::Result<()> {
    types.func_wrap(
        "[method]outgoing-request.set-authority",
        |mut store: Store<'_>,
         (request, authority): (Resource<types::OutgoingRequest>, Option<WasmStr>)| {
            host_api::call(&mut store)?;
            let authority = authority
                .map(|authority| copy(&mut store, HttpPart::Authority, &authority))
                .transpose()?;
            let mut http = store.data_mut().http();
            Ok((types::HostOutgoingRequest::set_authority(
                &mut http, request, authority,
            )?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-path-with-query",
        |mut store: Store<'_>,
         (request, path): (Resource<types::OutgoingRequest>, Option<WasmStr>)| {
            host_api::call(&mut store)?;
            let path = path
                .map(|path| copy(&mut store, HttpPart::PathWithQuery, &path))
                .transpose()?;
            let mut http = store.data_mut().http();
            Ok((types::HostOutgoingRequest::set_path_with_query(
                &mut http, request, path,
            )?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.body",
        |mut store: Store<'_>, (request,): (Resource<types::OutgoingRequest>,)| {
            host_api::call(&mut store)?;
            let mut http = store.data_mut().http();
            Ok((types::HostOutgoingRequest::body(&mut http, request)?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-body.write",
        |mut store: Store<'_>, (body,): (Resource<types::OutgoingBody>,)| {
            host_api::call(&mut store)?;
            let mut http = store.data_mut().http();
            let stream: Result<Resource<DynOutputStream>, ()> =
                types::HostOutgoingBody::write(&mut http, body)?;
            Ok((stream,))
        },
    )?;
    Ok(())
}

/// `method` copied out of guest memory, its `other` case charged first.
fn owned_method(store: &mut Store<'_>, method: Method) -> wasmtime::Result<types::Method> {
    Ok(match method {
        Method::Get => types::Method::Get,
        Method::Head => types::Method::Head,
        Method::Post => types::Method::Post,
        Method::Put => types::Method::Put,
        Method::Delete => types::Method::Delete,
        Method::Connect => types::Method::Connect,
        Method::Options => types::Method::Options,
        Method::Trace => types::Method::Trace,
        Method::Patch => types::Method::Patch,
        Method::Other(other) => types::Method::Other(copy(store, HttpPart::Method, &other)?),
    })
}

/// Item `index` of `list`, a view into guest memory.
fn nth<T: Lift + 'static>(
    list: &WasmList<T>,
    store: &mut Store<'_>,
    index: usize,
) -> wasmtime::Result<T> {
    list.get(&mut *store, index)
        .expect("an index below the list's length")
}

/// Charge `part` of `len` bytes to the job's budget, or trap naming the overrun.
fn charge(store: &mut Store<'_>, part: HttpPart, len: usize) -> wasmtime::Result<()> {
    let state = store.data_mut();
    state
        .spent
        .http_part(part, len)
        .map_err(|exceeded| state.spent.overrun(exceeded))
}

/// `text` copied out of guest memory once `part` of its length is charged.
fn copy(store: &mut Store<'_>, part: HttpPart, text: &WasmStr) -> wasmtime::Result<String> {
    let len = text.to_str(&*store)?.len();
    charge(store, part, len)?;
    Ok(text.to_str(&*store)?.into_owned())
}

/// What a header map holds, as wasmtime-wasi-http accounts for it plus the overhead each
/// part is charged.
fn held(fields: &FieldMap) -> usize {
    fields
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 2 * HTTP_PART_OVERHEAD)
        .sum()
}

/// A `header-error` for the guest, or the trap it stands for.
fn header_result<T>(
    result: Result<T, HeaderError>,
) -> wasmtime::Result<Result<T, types::HeaderError>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(err) => Ok(Err(err.downcast()?)),
    }
}

/// An `error-code` for the guest, or the trap it stands for.
fn http_result<T>(result: Result<T, HttpError>) -> wasmtime::Result<Result<T, types::ErrorCode>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(err) => Ok(Err(err.downcast()?)),
    }
}
