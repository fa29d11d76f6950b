//! The HTML pages of the authorization server: login, consent, error. Small and
//! self-contained (no scripts, no external resources); every value is escaped.

use axum::response::{Html, IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

/// HTML-escapes text and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} · Warren</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:26rem;margin:4rem auto;padding:0 1rem}}\
         label{{display:block;margin:.8rem 0 .2rem}}input[type=text],input[type=password]{{width:100%;padding:.4rem}}\
         button{{margin-top:1rem;padding:.4rem 1rem}}.error{{color:#b00020}}</style></head>\
         <body><h1>{t}</h1>\n{body}\n</body></html>\n",
        t = esc(title)
    )
}

/// A page with the headers every OAuth page carries: no caching, no framing.
pub fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let mut r = (status, Html(layout(title, body))).into_response();
    crate::http::set_headers(
        &mut r,
        &[
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
            ),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
    );
    r
}

/// Lets a sign-in form's submission end where the client sends the browser. Browsers apply
/// `form-action` to every redirect that follows a form post (login → authorize → the
/// client's redirect URI → wherever the client goes next, e.g. the proxy's hand-off to a
/// workspace host), so any `form-action` list stops the sign-in at some hop. The page has
/// no script (`default-src 'none'`) and escapes all it shows, which is what keeps injected
/// forms out; `form-action` is dropped on the login and consent pages only.
pub fn allow_form_redirects(r: &mut Response) {
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
}

/// An error shown in the browser instead of redirecting (bad client or redirect URI).
pub fn error(status: StatusCode, message: &str) -> Response {
    page(
        status,
        "Sign-in error",
        &format!("<p class=\"error\">{}</p>", esc(message)),
    )
}

/// Hidden inputs carrying the authorization request through a form post.
pub fn hidden_fields(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| {
            format!(
                "<input type=\"hidden\" name=\"{}\" value=\"{}\">\n",
                esc(k),
                esc(v)
            )
        })
        .collect()
}

/// The login page's body: the password form (unless passwords are off) and the single
/// sign-on button (`sso`: its label and link) when there is one.
pub fn login(
    client_name: &str,
    hidden: &str,
    username: &str,
    error: Option<&str>,
    sso: Option<(&str, &str)>,
    password: bool,
) -> String {
    let err = error
        .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>\n", esc(e)))
        .unwrap_or_default();
    let sso = sso
        .map(|(name, link)| {
            format!(
                "<p><a class=\"button\" id=\"sso\" href=\"{}\">Sign in with {}</a></p>\n",
                esc(link),
                esc(name)
            )
        })
        .unwrap_or_default();
    let form = if password {
        format!(
            "<form method=\"post\" action=\"/oauth/login\">\n{hidden}\
             <label for=\"username\">Username</label>\
             <input type=\"text\" id=\"username\" name=\"username\" autocomplete=\"username\" value=\"{user}\" required autofocus>\
             <label for=\"password\">Password</label>\
             <input type=\"password\" id=\"password\" name=\"password\" autocomplete=\"current-password\" required>\
             <button type=\"submit\">Sign in</button></form>",
            user = esc(username),
        )
    } else {
        String::new()
    };
    format!(
        "<p>Sign in to continue to <strong>{client}</strong>.</p>\n{err}{sso}{form}",
        client = esc(client_name),
    )
}

pub fn consent(client_name: &str, username: &str, hidden: &str) -> String {
    format!(
        "<p>Signed in as <strong>{user}</strong>.</p>\
         <p><strong>{client}</strong> asks to act as you on Warren.</p>\
         <form method=\"post\" action=\"/oauth/consent\">\n{hidden}\
         <button type=\"submit\" name=\"decision\" value=\"allow\">Allow</button> \
         <button type=\"submit\" name=\"decision\" value=\"deny\">Deny</button></form>",
        client = esc(client_name),
        user = esc(username),
    )
}
