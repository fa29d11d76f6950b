//! The web UI's error pages, built in one place: a domain error becomes a page with the
//! status the JSON API would answer with (`crate::http::error::status_of`), "not signed in"
//! a redirect to the sign-in page.

use super::layout;
use crate::app::{AppError, ErrorKind};
use crate::http::error::status_of;
use axum::response::{IntoResponse, Redirect, Response};
use http::{HeaderMap, StatusCode};
use maud::html;

/// A refusal or failure shown as a page.
#[derive(Debug)]
pub enum UiError {
    /// Not signed in (or the session ended): go to the sign-in page, then back to `next`.
    SignIn { next: String },
    /// A domain error, shown with its message.
    App(AppError),
    /// A form that did not come from this site's page (missing or wrong CSRF token).
    Csrf,
    /// A request the UI cannot read (a malformed form, say).
    BadRequest(String),
}

impl From<AppError> for UiError {
    fn from(e: AppError) -> Self {
        UiError::App(e)
    }
}

impl From<crate::store::StoreError> for UiError {
    fn from(e: crate::store::StoreError) -> Self {
        UiError::App(e.into())
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        match self {
            UiError::SignIn { next } => {
                let to = format!(
                    "/login?next={}",
                    url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
                );
                Redirect::to(&to).into_response()
            }
            UiError::App(e) if e.kind == ErrorKind::NotFound => html_not_found(),
            UiError::App(e) => {
                let status = status_of(e.kind);
                let mut r = error_page(status, "Something went wrong", &e.message);
                if let Some(secs) = e.retry_after {
                    r.headers_mut()
                        .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
                }
                r
            }
            UiError::Csrf => error_page(
                StatusCode::FORBIDDEN,
                "Form expired",
                "This form did not come from this site's page, or it expired. Go back, reload \
                 the page and try again.",
            ),
            UiError::BadRequest(m) => error_page(StatusCode::BAD_REQUEST, "Bad request", &m),
        }
    }
}

fn error_page(status: StatusCode, title: &str, message: &str) -> Response {
    layout::bare(
        status,
        title,
        html! {
            p.error role="alert" { (message) }
            p { a href="/" { "Back to your workspaces" } }
        },
    )
}

/// The page for what does not exist or may not be seen (the same answer for both).
pub fn html_not_found() -> Response {
    error_page(
        StatusCode::NOT_FOUND,
        "Not found",
        "There is nothing here, or you may not see it.",
    )
}

/// Whether a request prefers HTML (a browser navigating) over the API's JSON.
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
}
