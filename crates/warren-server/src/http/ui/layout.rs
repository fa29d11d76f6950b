//! The frame every page shares (head, navigation, main landmark), the security headers of
//! every answer, and small pieces the pages repeat (form fields with their errors, state
//! badges, times).

use super::assets;
use super::session::{Viewer, CSRF_FIELD};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use http::{header, StatusCode};
use maud::{html, Markup, DOCTYPE};
use warren_types::{ActualState, DesiredState};

/// Scripts and styles from this origin only; no inline script, no eval, no framing; forms
/// post to this origin only; server-sent events to this origin only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// htmx's settings: no eval (`hx-on`, `js:`), no inline `<style>` for its indicators (the
/// stylesheet has them), no scripts from swapped content, requests to this origin only.
const HTMX_CONFIG: &str = r#"{"allowEval":false,"includeIndicatorStyles":false,"allowScriptTags":false,"selfRequestsOnly":true,"historyCacheSize":0}"#;

/// Adds the headers every UI answer carries.
pub fn secure(mut r: Response) -> Response {
    let cached = r.headers().contains_key(header::CACHE_CONTROL);
    crate::http::set_headers(
        &mut r,
        &[
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "same-origin"),
        ],
    );
    if !cached {
        crate::http::set_headers(&mut r, &[(header::CACHE_CONTROL, "no-store")]);
    }
    r
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="htmx-config" content=(HTMX_CONFIG);
            title { (title) " · Warren" }
            link rel="stylesheet" href=(assets::url("warren.css"));
            script src=(assets::url("htmx.min.js")) defer {}
            script src=(assets::url("sse.min.js")) defer {}
            script src=(assets::url("warren.js")) defer {}
        }
    }
}

/// A page of a signed-in user: navigation, then `body` under the page's heading.
pub fn page(viewer: &Viewer, status: StatusCode, title: &str, body: Markup) -> Response {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    nav aria-label="Main" {
                        a.brand href="/" { "Warren" }
                        a href="/" { "Workspaces" }
                        a href="/workspaces/new" { "New workspace" }
                        a href="/account" { "Account" }
                        @if viewer.is_admin() { a href="/admin" { "Admin" } }
                        a href="/groups" { "Groups" }
                        a href="/usage" { "Usage" }
                        a href="/audit" { "Audit log" }
                    }
                    form.signout method="post" action="/logout" {
                        (csrf(viewer))
                        span.who { (viewer.username()) }
                        button type="submit" { "Sign out" }
                    }
                }
                main id="main" {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    secure((status, doc).into_response())
}

/// A page without navigation (sign-in, errors).
pub fn bare(status: StatusCode, title: &str, body: Markup) -> Response {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body.bare {
                main id="main" {
                    p.brand { a href="/" { "Warren" } }
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    secure((status, doc).into_response())
}

/// The hidden CSRF field every state-changing form carries.
pub fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(viewer.csrf); }
}

/// The message of an error about `field`, shown under it and tied to it for screen readers.
pub fn field_error(field: &str, error: Option<&str>) -> Markup {
    html! {
        @if let Some(e) = error {
            p.field-error id=(format!("{field}-error")) role="alert" { (e) }
        }
    }
}

/// A form of one danger button posting to `action` (remove, revoke), with its CSRF field;
/// the button's accessible name says what it acts on (`"{verb} {what}"`).
pub fn danger_button(viewer: &Viewer, action: &str, verb: &str, what: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            (csrf(viewer))
            button.danger type="submit" aria-label=(format!("{verb} {what}")) { (verb) }
        }
    }
}

/// A labelled one-line input in a `div.field`, its error (if any) under it and tied to it
/// for screen readers. `name` defaults to `id`.
#[derive(Default)]
pub struct Input<'a> {
    pub id: &'a str,
    pub name: Option<&'a str>,
    pub label: &'a str,
    /// `text` unless given (`password`, `number`).
    pub kind: Option<&'a str>,
    pub value: Option<&'a str>,
    pub placeholder: Option<&'a str>,
    pub autocomplete: Option<&'a str>,
    pub required: bool,
    pub error: Option<&'a str>,
}

pub fn input(f: Input<'_>) -> Markup {
    let (described, bad) = invalid(f.id, f.error);
    html! {
        div.field {
            label for=(f.id) { (f.label) }
            input type=(f.kind.unwrap_or("text")) id=(f.id) name=(f.name.unwrap_or(f.id))
                value=[f.value] placeholder=[f.placeholder] autocomplete=[f.autocomplete]
                required[f.required] aria-describedby=[described] aria-invalid=[bad];
            (field_error(f.id, f.error))
        }
    }
}

/// A labelled `<select>` of `options` in a `div.field`, its error (if any) under it and tied
/// to it for screen readers.
pub fn select_field(name: &str, label: &str, error: Option<&str>, options: Markup) -> Markup {
    html! {
        div.field {
            label for=(name) { (label) }
            select id=(name) name=(name) aria-invalid=[error.map(|_| "true")]
                aria-describedby=[error.map(|_| format!("{name}-error"))] { (options) }
            (field_error(name, error))
        }
    }
}

/// `aria-describedby`/`aria-invalid` values for a field with or without an error.
pub fn invalid(field: &str, error: Option<&str>) -> (Option<String>, Option<&'static str>) {
    match error {
        Some(_) => (Some(format!("{field}-error")), Some("true")),
        None => (None, None),
    }
}

/// A state as a badge with what it is heading for; states on the way somewhere show a
/// progress indicator.
pub fn state_badge(actual: ActualState, desired: DesiredState) -> Markup {
    let settled = matches!(
        (desired, actual),
        (DesiredState::Running, ActualState::Running)
            | (DesiredState::Stopped, ActualState::Stopped)
            | (DesiredState::Terminated, ActualState::Terminated)
            | (
                _,
                ActualState::Failed | ActualState::Error | ActualState::Unknown
            )
    );
    let class = match actual {
        ActualState::Running => "state running",
        ActualState::Failed | ActualState::Error => "state failed",
        ActualState::Unknown => "state unknown",
        ActualState::Stopped | ActualState::Terminated => "state stopped",
        _ => "state busy",
    };
    let heading = match desired {
        DesiredState::RestartRequested => "restarting",
        d => d.as_str(),
    };
    html! {
        span class=(class) data-state=(actual.as_str()) {
            @if !settled { span.spinner aria-hidden="true" {} }
            (actual.as_str())
            @if !settled { span.desired { " → " (heading) } }
        }
    }
}

/// A time as its UTC date and minute, in a `<time>` element.
pub fn date(t: DateTime<Utc>) -> Markup {
    html! { time datetime=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M")) } }
}

/// A time to come as "in 3 min" (or, once passed, "now"), with the exact time in a `<time>`
/// element.
pub fn ago_or_in(t: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    let secs = (t - now).num_seconds();
    let text = if secs <= 0 {
        "now".to_owned()
    } else if secs < 60 {
        format!("in {secs} s")
    } else if secs < 3600 {
        format!("in {} min", secs / 60)
    } else if secs < 86_400 {
        format!("in {} h {} min", secs / 3600, (secs % 3600) / 60)
    } else {
        format!("in {} d {} h", secs / 86_400, (secs % 86_400) / 3600)
    };
    html! { time datetime=(t.to_rfc3339()) title=(t.to_rfc3339()) { (text) } }
}

/// A time as "3 min ago", with the exact time in a `<time>` element.
pub fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    let secs = (now - t).num_seconds().max(0);
    let text = if secs < 60 {
        format!("{secs} s ago")
    } else if secs < 3600 {
        format!("{} min ago", secs / 60)
    } else if secs < 86_400 {
        format!("{} h ago", secs / 3600)
    } else {
        format!("{} d ago", secs / 86_400)
    };
    html! { time datetime=(t.to_rfc3339()) title=(t.to_rfc3339()) { (text) } }
}
