//! The proxy's own cookies: reading them, setting them (always host-only, HttpOnly,
//! SameSite=Lax, Secure under https) and keeping workspaces' hands off them — removed from
//! what the workspace sees, and never set or shadowed by what the workspace answers.
//!
//! Every workspace host is under one domain, so a workspace could otherwise plant a cookie
//! of our name on all of them ("cookie tossing": `Domain=` from a response, or from its
//! pages' script). Three things keep that harmless: under https our cookies carry the
//! `__Host-` prefix, which browsers refuse to accept with a `Domain` or from another host;
//! an upstream's `Set-Cookie` of one of our names is dropped and its `Domain` removed; and a
//! request carrying several cookies of our name has each tried, so a planted one can neither
//! shadow the real one nor lock the visitor into a sign-in loop.

use http::header::{COOKIE, SET_COOKIE};
use http::{HeaderMap, HeaderValue};
use std::borrow::Cow;

/// The session on one workspace (or terminal) host.
pub(crate) const SESSION: &str = "warren_session";
/// Binds a sign-in to the browser that started it, on the workspace host.
pub(crate) const BIND: &str = "warren_bind";
/// A share link opened on one endpoint host.
pub(crate) const SHARE: &str = "warren_share";
/// Prefix of the per-sign-in state cookies on the auth host (`warren_st_{state}`).
pub(crate) const STATE_PREFIX: &str = "warren_st_";
/// Browsers accept a cookie so named only from its own host over https, with `Secure`,
/// `Path=/` and no `Domain`: no other host can set or overwrite it.
const HOST_PREFIX: &str = "__Host-";

/// `prefix` at the start of `s`, ignoring ASCII case; what follows it.
fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Whether `name` is (or could be taken by a browser or by us for) one of the proxy's
/// cookies: with or without a cookie-name prefix, in any case.
fn is_ours(name: &str) -> bool {
    let name = name.trim();
    let bare = strip_prefix_ci(name, HOST_PREFIX)
        .or_else(|| strip_prefix_ci(name, "__Secure-"))
        .unwrap_or(name);
    bare.eq_ignore_ascii_case(SESSION)
        || bare.eq_ignore_ascii_case(BIND)
        || bare.eq_ignore_ascii_case(SHARE)
        || strip_prefix_ci(bare, STATE_PREFIX).is_some()
}

/// The name cookie `name` goes by on the wire: `__Host-`-prefixed under https, where the
/// browser can enforce that prefix; plain under http, where it cannot be used at all.
pub(crate) fn wire_name(name: &str, secure: bool) -> Cow<'_, str> {
    if secure {
        Cow::Owned(format!("{HOST_PREFIX}{name}"))
    } else {
        Cow::Borrowed(name)
    }
}

/// Every `name=value` pair of every `Cookie` header (HTTP/2 may send several).
fn pairs(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|p| {
            let (k, v) = p.trim().split_once('=')?;
            Some((k.trim(), v.trim().trim_matches('"')))
        })
}

/// Every value of cookie `name` (by its wire name), in the order the browser sent them. A
/// browser sends several when other hosts of the domain planted one of the same name; the
/// caller tries each, since the planted one may well come first.
pub(crate) fn get_all<'a>(
    headers: &'a HeaderMap,
    name: &str,
    secure: bool,
) -> impl Iterator<Item = &'a str> {
    let name = wire_name(name, secure).into_owned();
    pairs(headers)
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Removes the proxy's cookies from the request; other cookies stay, joined into one
/// header as HTTP/1.1 wants.
pub(crate) fn strip_ours(headers: &mut HeaderMap) {
    if !headers.contains_key(COOKIE) {
        return;
    }
    let kept: Vec<String> = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter(|p| !is_ours(p.split_once('=').map(|(k, _)| k.trim()).unwrap_or(p)))
        .map(str::to_owned)
        .collect();
    headers.remove(COOKIE);
    if !kept.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&kept.join("; ")) {
            headers.insert(COOKIE, v);
        }
    }
}

/// One upstream `Set-Cookie` as the browser may get it: `None` for a cookie of one of our
/// names; otherwise without any `Domain` attribute, so it lands on the answering host only.
fn host_only_upstream_cookie(v: &HeaderValue) -> Option<HeaderValue> {
    let bytes = v.as_bytes();
    let mut parts = bytes.split(|b| *b == b';');
    let pair = parts.next().unwrap_or_default();
    // A pair without `=` is a nameless cookie to browsers, never one of ours.
    if let Some(eq) = pair.iter().position(|b| *b == b'=') {
        if std::str::from_utf8(&pair[..eq]).map_or(true, is_ours) {
            return None;
        }
    }
    let mut out: Vec<u8> = pair.to_vec();
    let mut dropped = false;
    for attr in parts {
        let name = attr.split(|b| *b == b'=').next().unwrap_or_default();
        if name.trim_ascii().eq_ignore_ascii_case(b"domain") {
            dropped = true;
            continue;
        }
        out.push(b';');
        out.extend_from_slice(attr);
    }
    if !dropped {
        return Some(v.clone());
    }
    HeaderValue::from_bytes(&out).ok()
}

/// Applies [`host_only_upstream_cookie`] to every `Set-Cookie` of an upstream's answer.
pub(crate) fn filter_upstream_set_cookies(headers: &mut HeaderMap) {
    if !headers.contains_key(SET_COOKIE) {
        return;
    }
    let kept: Vec<HeaderValue> = headers
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(host_only_upstream_cookie)
        .collect();
    headers.remove(SET_COOKIE);
    for v in kept {
        headers.append(SET_COOKIE, v);
    }
}

/// A `Set-Cookie` value for a host-only cookie; `max_age` 0 deletes it.
pub(crate) fn set(name: &str, value: &str, max_age: u64, secure: bool) -> HeaderValue {
    let name = wire_name(name, secure);
    let mut s = format!("{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax");
    if secure {
        s.push_str("; Secure");
    }
    HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static("invalid=; Max-Age=0"))
}

/// Deletes cookie `name`.
pub(crate) fn clear(name: &str, secure: bool) -> HeaderValue {
    set(name, "", 0, secure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_only_ours() {
        let mut h = HeaderMap::new();
        h.append(
            COOKIE,
            HeaderValue::from_static("a=1; warren_session=xyz; b=2"),
        );
        h.append(
            COOKIE,
            HeaderValue::from_static(
                "warren_bind=q; warren_st_abc=z; c=3; __Host-warren_session=h; warren_share=s",
            ),
        );
        assert_eq!(get_all(&h, SESSION, false).collect::<Vec<_>>(), ["xyz"]);
        assert_eq!(get_all(&h, SESSION, true).collect::<Vec<_>>(), ["h"]);
        assert_eq!(get_all(&h, BIND, false).collect::<Vec<_>>(), ["q"]);
        strip_ours(&mut h);
        assert_eq!(h.get_all(COOKIE).iter().count(), 1);
        assert_eq!(h.get(COOKIE).unwrap(), "a=1; b=2; c=3");
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_static("warren_session=xyz"));
        strip_ours(&mut h);
        assert!(h.get(COOKIE).is_none());
    }

    #[test]
    fn every_value_of_a_name_in_order() {
        let mut h = HeaderMap::new();
        h.append(
            COOKIE,
            HeaderValue::from_static("warren_session=planted; a=1"),
        );
        h.append(COOKIE, HeaderValue::from_static("warren_session=real"));
        assert_eq!(
            get_all(&h, SESSION, false).collect::<Vec<_>>(),
            ["planted", "real"]
        );
    }

    #[test]
    fn set_cookie_attributes() {
        assert_eq!(
            set(SESSION, "v", 60, true),
            "__Host-warren_session=v; Path=/; Max-Age=60; HttpOnly; SameSite=Lax; Secure"
        );
        assert_eq!(
            clear(BIND, false),
            "warren_bind=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"
        );
    }

    #[test]
    fn upstream_cookies_lose_our_names_and_their_domain() {
        let mut h = HeaderMap::new();
        for v in [
            "warren_session=x; Domain=ws.example.com; Path=/",
            "__HOST-Warren_Session=x; Path=/; Secure",
            " WARREN_BIND =y",
            "warren_st_abc=z; domain=.ws.example.com",
            "other=1; Domain=ws.example.com; Path=/",
            "app=2; Path=/app;  DOMAIN = WS.example.com ; HttpOnly",
            "plain=3; Path=/",
        ] {
            h.append(SET_COOKIE, HeaderValue::from_static(v));
        }
        filter_upstream_set_cookies(&mut h);
        let got: Vec<&str> = h
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            got,
            [
                "other=1; Path=/",
                "app=2; Path=/app; HttpOnly",
                "plain=3; Path=/"
            ]
        );
    }
}
