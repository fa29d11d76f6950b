//! Working hours (issue 41, item 7): the days of a user's week, a time their running
//! workspaces stop and (optionally) a time those it stopped start again, in the user's time
//! zone. They come on top of the agent's limits, which still apply.
//!
//! Times are reckoned in the zone's local time, daylight saving included: a stop at 18:00 is at
//! 18:00 on the wall clock in summer and in winter. A local time a clock change skips (02:30
//! on the spring-forward night) is taken at the first instant after the gap; one it repeats,
//! at its first occurrence.

use chrono::{Datelike, NaiveTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// How many days around now are looked at for the previous or next boundary: more than a
/// week, so a schedule of one day a week always has one.
const SEARCH_DAYS: i64 = 8;

/// A day of the week.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl Day {
    pub const ALL: [Day; 7] = [
        Day::Mon,
        Day::Tue,
        Day::Wed,
        Day::Thu,
        Day::Fri,
        Day::Sat,
        Day::Sun,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Day::Mon => "mon",
            Day::Tue => "tue",
            Day::Wed => "wed",
            Day::Thu => "thu",
            Day::Fri => "fri",
            Day::Sat => "sat",
            Day::Sun => "sun",
        }
    }

    fn of(w: chrono::Weekday) -> Day {
        Day::ALL[w.num_days_from_monday() as usize]
    }

    /// `mon`, `mon,wed,fri`, `mon-fri`, `sat-sun` (ranges and lists, as people write them).
    pub fn parse_list(s: &str) -> Result<Vec<Day>, String> {
        let one = |d: &str| {
            Day::ALL
                .into_iter()
                .find(|x| x.as_str() == d.trim().to_ascii_lowercase())
                .ok_or_else(|| format!("{d:?} is not a day (mon, tue, wed, thu, fri, sat, sun)"))
        };
        let mut out = vec![];
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (one(a)? as usize, one(b)? as usize);
                    if a > b {
                        return Err(format!("{part:?}: a range goes from Monday towards Sunday"));
                    }
                    out.extend(&Day::ALL[a..=b]);
                }
                None => out.push(one(part)?),
            }
        }
        out.sort();
        out.dedup();
        if out.is_empty() {
            return Err("no days given".into());
        }
        Ok(out)
    }
}

/// A user's working hours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkingHours {
    /// IANA time zone, e.g. `Europe/Paris`, `America/New_York`, `UTC`.
    pub timezone: String,
    /// The days they apply to.
    pub days: Vec<Day>,
    /// Local time (`HH:MM`) the workspaces they stopped start again; none: no autostart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// Local time (`HH:MM`) running workspaces stop.
    pub stop: String,
}

fn time_of(field: &str, s: &str) -> Result<NaiveTime, String> {
    let ok = s.len() == 5 && s.as_bytes()[2] == b':';
    ok.then(|| NaiveTime::parse_from_str(s, "%H:%M").ok())
        .flatten()
        .ok_or_else(|| format!("{field}: {s:?} is not a time of day like 18:00 (HH:MM, 24 hours)"))
}

impl WorkingHours {
    /// Checks the zone, the days and the times; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.zone()?;
        if self.days.is_empty() {
            return Err("days: at least one day".into());
        }
        let stop = time_of("stop", &self.stop)?;
        if let Some(s) = &self.start {
            if time_of("start", s)? == stop {
                return Err("start: the same time as stop".into());
            }
        }
        Ok(())
    }

    fn zone(&self) -> Result<chrono_tz::Tz, String> {
        self.timezone.parse::<chrono_tz::Tz>().map_err(|_| {
            format!(
                "timezone: {:?} is not an IANA time zone (like Europe/Paris, America/New_York or UTC)",
                self.timezone
            )
        })
    }

    /// Every instant (unix ms) within [`SEARCH_DAYS`] of `now_ms` at which local time `at`
    /// falls on one of the days, in order.
    fn instants(&self, at: &str, now_ms: i64) -> Vec<i64> {
        let (Ok(zone), Ok(time)) = (self.zone(), time_of("", at)) else {
            return vec![];
        };
        let Some(now) = Utc.timestamp_millis_opt(now_ms).single() else {
            return vec![];
        };
        let today = now.with_timezone(&zone).date_naive();
        (-SEARCH_DAYS..=SEARCH_DAYS)
            .filter_map(|offset| today.checked_add_signed(chrono::Duration::days(offset)))
            .filter(|date| self.days.contains(&Day::of(date.weekday())))
            .filter_map(|date| {
                let local = date.and_time(time);
                zone.from_local_datetime(&local)
                    .earliest()
                    // Skipped by a clock change: the first instant after the gap.
                    .or_else(|| {
                        zone.from_local_datetime(&(local + chrono::Duration::hours(1)))
                            .earliest()
                    })
                    .map(|t| t.timestamp_millis())
            })
            .collect()
    }

    /// The latest stop at or before `now_ms`.
    pub fn last_stop(&self, now_ms: i64) -> Option<i64> {
        self.instants(&self.stop, now_ms)
            .into_iter()
            .filter(|t| *t <= now_ms)
            .max()
    }

    /// The first stop after `now_ms`.
    pub fn next_stop(&self, now_ms: i64) -> Option<i64> {
        self.instants(&self.stop, now_ms)
            .into_iter()
            .find(|t| *t > now_ms)
    }

    /// The latest start at or before `now_ms` (none without a start time).
    pub fn last_start(&self, now_ms: i64) -> Option<i64> {
        let start = self.start.as_deref()?;
        self.instants(start, now_ms)
            .into_iter()
            .filter(|t| *t <= now_ms)
            .max()
    }

    /// `mon-fri 09:00–18:00 Europe/Paris`, as the CLI and the web UI show them.
    pub fn describe(&self) -> String {
        let days: Vec<&str> = self.days.iter().map(|d| d.as_str()).collect();
        match &self.start {
            Some(s) => format!("{} {s}–{} {}", days.join(","), self.stop, self.timezone),
            None => format!("{} until {} {}", days.join(","), self.stop, self.timezone),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    fn paris() -> WorkingHours {
        WorkingHours {
            timezone: "Europe/Paris".into(),
            days: Day::parse_list("mon-fri").unwrap(),
            start: Some("08:30".into()),
            stop: "18:00".into(),
        }
    }

    #[test]
    fn days_are_read_as_people_write_them() {
        assert_eq!(
            Day::parse_list("mon-wed,fri").unwrap(),
            vec![Day::Mon, Day::Tue, Day::Wed, Day::Fri]
        );
        assert_eq!(
            Day::parse_list("Sun, sat").unwrap(),
            vec![Day::Sat, Day::Sun]
        );
        assert!(Day::parse_list("fri-mon").unwrap_err().contains("range"));
        assert!(Day::parse_list("funday").unwrap_err().contains("not a day"));
        assert!(Day::parse_list("").is_err());
    }

    #[test]
    fn boundaries_follow_the_local_clock_through_daylight_saving() {
        let h = paris();
        h.validate().unwrap();
        // Friday 2026-03-27 19:00 in Paris (UTC+1): today's stop was 17:00 UTC.
        let fri_evening = ms("2026-03-27T18:00:00Z");
        assert_eq!(h.last_stop(fri_evening), Some(ms("2026-03-27T17:00:00Z")));
        // Next: Monday 2026-03-30, after the clocks moved (UTC+2): 16:00 UTC.
        assert_eq!(h.next_stop(fri_evening), Some(ms("2026-03-30T16:00:00Z")));
        assert_eq!(h.last_start(fri_evening), Some(ms("2026-03-27T07:30:00Z")));
        // Saturday: the last stop is still Friday's.
        assert_eq!(
            h.last_stop(ms("2026-03-28T12:00:00Z")),
            Some(ms("2026-03-27T17:00:00Z"))
        );
        let no_start = WorkingHours { start: None, ..h };
        assert_eq!(no_start.last_start(fri_evening), None);
    }

    #[test]
    fn a_time_the_clock_skips_is_taken_after_the_gap() {
        let h = WorkingHours {
            timezone: "Europe/Paris".into(),
            days: vec![Day::Sun],
            start: None,
            stop: "02:30".into(),
        };
        // Sunday 2026-03-29 02:30 does not exist in Paris: 03:30 local, 01:30 UTC.
        assert_eq!(
            h.next_stop(ms("2026-03-28T12:00:00Z")),
            Some(ms("2026-03-29T01:30:00Z"))
        );
    }

    #[test]
    fn bad_schedules_are_named() {
        let bad = |f: fn(&mut WorkingHours)| {
            let mut h = paris();
            f(&mut h);
            h.validate().unwrap_err()
        };
        assert!(bad(|h| h.timezone = "Mars/Olympus".into()).starts_with("timezone:"));
        assert!(bad(|h| h.stop = "6pm".into()).starts_with("stop:"));
        assert!(bad(|h| h.stop = "24:00".into()).starts_with("stop:"));
        assert!(bad(|h| h.start = Some("18:00".into())).starts_with("start:"));
        assert!(bad(|h| h.days.clear()).starts_with("days:"));
    }
}
