//! The proxy's own cookies: reading them, setting them (always host-only, HttpOnly,
//! SameSite=Lax, Secure under https) and removing them from what the workspace sees.

use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};

/// The session on one workspace (or terminal) host.
pub(crate) const SESSION: &str = "warren_session";
/// Binds a sign-in to the browser that started it, on the workspace host.
pub(crate) const BIND: &str = "warren_bind";
/// Prefix of the per-sign-in state cookies on the auth host (`warren_st_{state}`).
pub(crate) const STATE_PREFIX: &str = "warren_st_";

fn is_ours(name: &str) -> bool {
    name == SESSION || name == BIND || name.starts_with(STATE_PREFIX)
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

/// The value of cookie `name`; the first one when a browser sends several.
pub(crate) fn get<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    pairs(headers).find(|(k, _)| *k == name).map(|(_, v)| v)
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

/// A `Set-Cookie` value for a host-only cookie; `max_age` 0 deletes it.
pub(crate) fn set(name: &str, value: &str, max_age: u64, secure: bool) -> HeaderValue {
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
            HeaderValue::from_static("warren_bind=q; warren_st_abc=z; c=3"),
        );
        assert_eq!(get(&h, SESSION), Some("xyz"));
        assert_eq!(get(&h, BIND), Some("q"));
        strip_ours(&mut h);
        assert_eq!(h.get_all(COOKIE).iter().count(), 1);
        assert_eq!(h.get(COOKIE).unwrap(), "a=1; b=2; c=3");
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_static("warren_session=xyz"));
        strip_ours(&mut h);
        assert!(h.get(COOKIE).is_none());
    }

    #[test]
    fn set_cookie_attributes() {
        assert_eq!(
            set(SESSION, "v", 60, true),
            "warren_session=v; Path=/; Max-Age=60; HttpOnly; SameSite=Lax; Secure"
        );
        assert_eq!(
            clear(BIND, false),
            "warren_bind=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax"
        );
    }
}
