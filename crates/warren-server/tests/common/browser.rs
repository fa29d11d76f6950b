//! A browser for tests that need no rendering: keeps cookies by name, never follows
//! redirects, reads a page's hidden form fields.

use reqwest::header::{LOCATION, SET_COOKIE};
use std::collections::BTreeMap;

/// A browser: keeps cookies by name, never follows redirects.
pub struct Browser {
    pub base: String,
    pub http: reqwest::Client,
    pub jar: BTreeMap<String, String>,
}

pub struct Page {
    pub status: u16,
    pub location: Option<String>,
    pub body: String,
    pub set_cookies: Vec<String>,
    pub headers: reqwest::header::HeaderMap,
}

impl Page {
    /// The hidden inputs of the page's form, unescaped.
    pub fn hidden(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        for part in self.body.split("<input type=\"hidden\" name=\"").skip(1) {
            let (name, rest) = part.split_once("\" value=\"").expect("value");
            let value = rest.split_once('"').expect("end").0;
            out.push((unescape(name), unescape(value)));
        }
        out
    }
}

pub fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

impl Browser {
    pub fn new(base: &str) -> Browser {
        Browser {
            base: base.to_owned(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            jar: BTreeMap::new(),
        }
    }

    pub fn cookie_header(&self) -> String {
        self.jar
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub async fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let req = if self.jar.is_empty() {
            req
        } else {
            req.header(reqwest::header::COOKIE, self.cookie_header())
        };
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let set_cookies: Vec<String> = headers
            .get_all(SET_COOKIE)
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect();
        for c in &set_cookies {
            let first = c.split(';').next().expect("pair");
            let (k, v) = first.split_once('=').expect("=");
            if v.is_empty() || c.contains("Max-Age=0") {
                self.jar.remove(k);
            } else {
                self.jar.insert(k.to_owned(), v.to_owned());
            }
        }
        let location = headers
            .get(LOCATION)
            .map(|v| v.to_str().expect("ascii").to_owned());
        let body = resp.text().await.expect("body");
        Page {
            status,
            location,
            body,
            set_cookies,
            headers,
        }
    }

    pub async fn get(&mut self, path_or_url: &str) -> Page {
        let url = if path_or_url.starts_with("http") {
            path_or_url.to_owned()
        } else {
            format!("{}{path_or_url}", self.base)
        };
        let req = self.http.get(url);
        self.send(req).await
    }

    pub async fn post_form(&mut self, path: &str, form: &[(String, String)]) -> Page {
        let req = self.http.post(format!("{}{path}", self.base)).form(form);
        self.send(req).await
    }
}
