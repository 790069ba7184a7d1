// The little of URLs that sending a request needs, ported from the Rust SDK's
// sdk/src/http/url.rs so that both name and follow requests alike: checking a URL can be
// sent, telling two origins apart, resolving a redirect's `Location`, and a redacted form
// for reasons. Hand-written rather than `URL`, which normalises what it parses (hosts,
// dot segments, percent-escapes): a request goes out as written.

import { bounded, utf8 } from "./text.js";

/** The longest URL a reason quotes, in bytes. */
const LABEL_BYTES = 256;

/**
 * `url` split into its scheme, authority and path with query (at least `/`, without the
 * fragment, which is never sent).
 * @returns {{ https: boolean, authority: string, pathAndQuery: string } | { error: string }}
 */
export function split(url) {
  const at = url.indexOf("://");
  if (at < 0) return { error: "it is no absolute URL (`http://host/path`)" };
  const scheme = url.slice(0, at).toLowerCase();
  if (scheme !== "http" && scheme !== "https") {
    return { error: "its scheme is neither `http` nor `https`" };
  }
  const rest = url.slice(at + 3);
  const end = rest.search(/[/?#]/);
  const authority = end < 0 ? rest : rest.slice(0, end);
  const tail = (end < 0 ? "" : rest.slice(end)).split("#")[0];
  if (authority === "") return { error: "it names no host" };
  if (authority.includes("@")) {
    return { error: "it carries user information, which is not sent: use an `authorization` header" };
  }
  return { https: scheme === "https", authority, pathAndQuery: tail.startsWith("/") ? tail : `/${tail}` };
}

/** `https://host:port`, lowercase, to tell whether two URLs share an origin; undefined when unsendable. */
export function origin(url) {
  const target = split(url);
  if (target.error !== undefined) return undefined;
  return `${target.https ? "https" : "http"}://${target.authority.toLowerCase()}`;
}

/**
 * `url` without its query, fragment and user information, bounded, for reasons: a query
 * often carries an API key, and reasons go to logs and dead letters.
 */
export function redacted(url) {
  const withoutQuery = url.split(/[?#]/)[0];
  let shown = withoutQuery;
  const at = withoutQuery.indexOf("://");
  if (at >= 0) {
    const rest = withoutQuery.slice(at + 3);
    const slash = rest.indexOf("/");
    const authority = slash < 0 ? rest : rest.slice(0, slash);
    const path = slash < 0 ? "" : rest.slice(slash);
    const host = authority.split("@").pop();
    shown = `${withoutQuery.slice(0, at)}://${host}${path}`;
  }
  return bounded(utf8(shown), LABEL_BYTES);
}

/** The absolute URL a redirect from `base` to `location` leads to; undefined when it is no http(s) URL. */
export function resolve(base, location) {
  location = location.trim();
  let resolved;
  if (location.includes("://")) {
    resolved = location;
  } else {
    const target = split(base);
    if (target.error !== undefined) return undefined;
    const scheme = target.https ? "https" : "http";
    if (location.startsWith("//")) {
      resolved = `${scheme}:${location}`;
    } else if (location.startsWith("/")) {
      resolved = `${scheme}://${target.authority}${location}`;
    } else {
      const path = target.pathAndQuery.split("?")[0];
      const dir = location.startsWith("?") ? path : path.slice(0, path.lastIndexOf("/") + 1);
      resolved = `${scheme}://${target.authority}${dir}${location}`;
    }
  }
  return split(resolved).error === undefined ? resolved : undefined;
}
