//! Signed values of the browser side: the server session cookie's value and the CSRF
//! tokens of the login and consent forms (HMAC-SHA256 under the server's OAuth key).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use warren_types::UserId;

/// How long a server session lasts.
pub const SESSION_TTL_MS: i64 = 12 * 3_600_000;

fn mac(key: &[u8], purpose: &str, value: &str) -> String {
    // HMAC accepts keys of any length.
    let mut m = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    m.update(purpose.as_bytes());
    m.update(b"\0");
    m.update(value.as_bytes());
    URL_SAFE_NO_PAD.encode(m.finalize().into_bytes())
}

fn ct_eq(a: &str, b: &str) -> bool {
    !a.is_empty() && crate::crypto::ct_eq(a, b)
}

/// `{user}.{expires_ms}.{mac}`.
pub fn session_value(key: &[u8], user: UserId, expires_ms: i64) -> String {
    let body = format!("{}.{expires_ms}", user.get());
    format!("{body}.{}", mac(key, "session", &body))
}

/// The user of a session cookie value and when it was issued (ms), if its signature holds
/// and it has not expired.
pub fn check_session(key: &[u8], value: &str, now_ms: i64) -> Option<(UserId, i64)> {
    let (body, sig) = value.rsplit_once('.')?;
    if !ct_eq(sig, &mac(key, "session", body)) {
        return None;
    }
    let (user, exp) = body.split_once('.')?;
    let exp: i64 = exp.parse().ok()?;
    (exp > now_ms).then_some(())?;
    user.parse().ok().map(|u| (UserId(u), exp - SESSION_TTL_MS))
}

/// The login form's CSRF token for a pre-login cookie value.
pub fn login_csrf(key: &[u8], prelogin: &str) -> String {
    mac(key, "login-form", prelogin)
}

pub fn check_login_csrf(key: &[u8], prelogin: &str, token: &str) -> bool {
    !prelogin.is_empty() && ct_eq(token, &login_csrf(key, prelogin))
}

/// The consent form's CSRF token, bound to the session cookie value.
pub fn consent_csrf(key: &[u8], session: &str) -> String {
    mac(key, "consent-form", session)
}

pub fn check_consent_csrf(key: &[u8], session: &str, token: &str) -> bool {
    !session.is_empty() && ct_eq(token, &consent_csrf(key, session))
}

/// The web UI's forms' CSRF token, bound to the session cookie value.
pub fn ui_csrf(key: &[u8], session: &str) -> String {
    mac(key, "ui-form", session)
}

/// The single sign-on cookie's value: `{payload}.{mac}`, the payload base64url (it carries
/// the state, nonce and PKCE verifier of one sign-in in progress, and where to return).
pub fn sso_value(key: &[u8], payload: &[u8]) -> String {
    let body = URL_SAFE_NO_PAD.encode(payload);
    format!("{body}.{}", mac(key, "sso", &body))
}

/// The payload of a single sign-on cookie value, if its signature holds.
pub fn check_sso(key: &[u8], value: &str) -> Option<Vec<u8>> {
    let (body, sig) = value.rsplit_once('.')?;
    if !ct_eq(sig, &mac(key, "sso", body)) {
        return None;
    }
    URL_SAFE_NO_PAD.decode(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_round_trip_and_tamper() {
        let k = b"key-one";
        let v = session_value(k, UserId(7), 1_000);
        assert_eq!(
            check_session(k, &v, 999),
            Some((UserId(7), 1_000 - SESSION_TTL_MS))
        );
        assert_eq!(check_session(k, &v, 1_000), None, "expired");
        assert_eq!(check_session(b"key-two", &v, 0), None, "other key");
        let forged = v.replacen('7', "8", 1);
        assert_eq!(check_session(k, &forged, 0), None, "tampered user");
        assert_eq!(check_session(k, "garbage", 0), None);
        let c = login_csrf(k, "abc");
        assert!(check_login_csrf(k, "abc", &c));
        assert!(!check_login_csrf(k, "abd", &c));
        assert!(!check_login_csrf(k, "", &login_csrf(k, "")));
        assert!(!check_consent_csrf(k, "abc", &c), "purposes differ");
        assert_ne!(ui_csrf(k, "abc"), consent_csrf(k, "abc"), "purposes differ");
    }
}
