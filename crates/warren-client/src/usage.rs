//! The client's call for the usage report, as JSON or CSV.

use super::*;
use warren_types::api::{SetBudgetRequest, SpaceBudget, UsageQuery, UsageReport};

/// The query as the server reads it: each set field a `key=value` pair.
fn pairs(q: &UsageQuery) -> Vec<(&'static str, String)> {
    let mut out = vec![];
    if let Some(b) = q.by {
        out.push(("by", b.as_str().to_owned()));
    }
    if let Some(t) = q.since {
        out.push(("since", t.to_rfc3339()));
    }
    if let Some(t) = q.until {
        out.push(("until", t.to_rfc3339()));
    }
    if let Some(s) = &q.space {
        out.push(("space", s.clone()));
    }
    out
}

fn budget(path: &str) -> Vec<String> {
    vec!["spaces".to_owned(), path.to_owned(), "budget".to_owned()]
}

impl Client {
    /// The budgets that apply to a space (its own and those above), with what remains.
    pub async fn space_budgets(&self, path: &str) -> Result<Vec<SpaceBudget>> {
        self.get(&budget(path)).await
    }

    pub async fn set_space_budget(
        &self,
        path: &str,
        req: &SetBudgetRequest,
    ) -> Result<SpaceBudget> {
        self.with_body(Method::PUT, &budget(path), req).await
    }

    pub async fn remove_space_budget(&self, path: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &budget(path)).await
    }

    /// `GET /usage`.
    pub async fn usage(&self, q: &UsageQuery) -> Result<UsageReport> {
        self.call(Method::GET, &["usage".to_owned()], &pairs(q), None::<&()>)
            .await
    }

    /// `GET /usage?format=csv`: the report as the server writes it in CSV.
    pub async fn usage_csv(&self, q: &UsageQuery) -> Result<String> {
        let mut query = pairs(q);
        query.push(("format", "csv".to_owned()));
        let (_, bytes) = self
            .send(
                Method::GET,
                self.url(&["usage".to_owned()]),
                &query,
                None::<&()>,
            )
            .await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}
