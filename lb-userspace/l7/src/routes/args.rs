//! Argument checking for predicates and filters: every mistake becomes a
//! [`RouteError`] at the call's position that says what the call takes.

use regex::Regex;

use super::RouteError;
use crate::eskip::{Arg, Call};

/// A call's arguments with the context errors need.
pub struct Args<'a> {
    pub call: &'a Call,
    pub route: &'a str,
}

impl<'a> Args<'a> {
    pub fn fail(&self, what: impl std::fmt::Display) -> RouteError {
        RouteError {
            pos: self.call.pos,
            route: self.route.to_owned(),
            message: format!("{}: {what}", self.call.name),
        }
    }

    /// Requires between `min` and `max` arguments.
    pub fn count(&self, min: usize, max: usize, usage: &str) -> Result<(), RouteError> {
        let n = self.call.args.len();
        if n < min || n > max {
            return Err(self.fail(format!(
                "takes {usage}, got {n} argument{}",
                if n == 1 { "" } else { "s" }
            )));
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.call.args.len()
    }

    /// A string argument: `"text"`, or `/text/` (skipper keeps a regexp literal as a
    /// plain string, so `Path(/a/)` is `Path("a")` there).
    pub fn str(&self, i: usize) -> Result<&'a str, RouteError> {
        match &self.call.args[i] {
            Arg::Str(s) | Arg::Regex(s) => Ok(s),
            other => Err(self.fail(format!(
                "argument {} must be a string, not {}",
                i + 1,
                kind(other)
            ))),
        }
    }

    pub fn num(&self, i: usize) -> Result<f64, RouteError> {
        match &self.call.args[i] {
            Arg::Num(n) => Ok(*n),
            other => Err(self.fail(format!(
                "argument {} must be a number, not {}",
                i + 1,
                kind(other)
            ))),
        }
    }

    /// A regexp argument: `/re/`, or a string holding one (skipper accepts both).
    pub fn regex(&self, i: usize) -> Result<Regex, RouteError> {
        let text = match &self.call.args[i] {
            Arg::Regex(r) | Arg::Str(r) => r,
            other => {
                return Err(self.fail(format!(
                    "argument {} must be a regexp, not {}",
                    i + 1,
                    kind(other)
                )));
            }
        };
        Regex::new(text).map_err(|e| self.fail(format!("argument {}: bad regexp: {e}", i + 1)))
    }

    /// Like [`Args::regex`], sharing one compiled regexp among the routes that spell
    /// it the same (as skipper does per routing table): a cluster's routes repeat
    /// few host patterns, and compiling each copy would dominate the table's build.
    pub fn regex_shared(
        &self,
        i: usize,
        cache: &mut std::collections::HashMap<String, Regex>,
    ) -> Result<Regex, RouteError> {
        if let Arg::Regex(text) | Arg::Str(text) = &self.call.args[i]
            && let Some(re) = cache.get(text.as_str())
        {
            return Ok(re.clone());
        }
        let re = self.regex(i)?;
        cache.insert(re.as_str().to_owned(), re.clone());
        Ok(re)
    }

    pub fn status(&self, i: usize) -> Result<http::StatusCode, RouteError> {
        let n = self.num(i)?;
        if n.fract() != 0.0 || !(100.0..=599.0).contains(&n) {
            return Err(self.fail(format!("{n} is not an HTTP status (100-599)")));
        }
        http::StatusCode::from_u16(n as u16).map_err(|e| self.fail(e))
    }

    pub fn header_name(&self, i: usize) -> Result<http::HeaderName, RouteError> {
        let s = self.str(i)?;
        http::HeaderName::from_bytes(s.as_bytes())
            .map_err(|_| self.fail(format!("{s:?} is not a header name")))
    }

    pub fn header_value(&self, i: usize) -> Result<http::HeaderValue, RouteError> {
        let s = self.str(i)?;
        http::HeaderValue::from_str(s)
            .map_err(|_| self.fail(format!("{s:?} is not a valid header value")))
    }

    /// A duration: a string in Go's syntax (`"3m"`, `"1m30s"`), or a number of
    /// milliseconds (skipper's rule for `fadeIn(3000)`); more than zero and within
    /// Go's range.
    pub fn duration(&self, i: usize) -> Result<std::time::Duration, RouteError> {
        let d = match &self.call.args[i] {
            Arg::Str(text) => lb_model::units::parse_duration(text).map_err(|e| self.fail(e))?,
            Arg::Num(ms) if *ms > 0.0 => {
                let nanos = ms * 1e6;
                if nanos.is_infinite() || nanos > lb_model::units::duration::MAX.as_nanos() as f64 {
                    return Err(self.fail(format!(
                        "{ms} ms is out of range: durations go up to 2562047h47m16.854775807s"
                    )));
                }
                std::time::Duration::from_nanos(nanos as u64)
            }
            _ => {
                return Err(self.fail(format!(
                    "argument {} must be milliseconds > 0 or a duration string like \"3m\"",
                    i + 1
                )));
            }
        };
        if d.is_zero() {
            return Err(self.fail(format!(
                "argument {}: the duration must be longer than 0",
                i + 1
            )));
        }
        Ok(d)
    }

    /// `fadeIn`'s duration as skipper reads it: a Go duration string, or a number of
    /// milliseconds; `None` for 0 or less, which skipper takes and which fades
    /// nothing. Beyond Go's range is an error.
    pub fn fade_duration(&self, i: usize) -> Result<Option<std::time::Duration>, RouteError> {
        let positive = match &self.call.args[i] {
            Arg::Str(text) => {
                lb_model::units::duration::parse_nanos(text).map_err(|e| self.fail(e))? > 0
            }
            Arg::Num(ms) => *ms > 0.0,
            Arg::Regex(_) => true,
        };
        if positive {
            self.duration(i).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A point in time: Unix seconds (a number), or an RFC 3339 string.
    pub fn time(&self, i: usize) -> Result<std::time::SystemTime, RouteError> {
        match &self.call.args[i] {
            Arg::Num(secs) => lb_model::units::from_unix_seconds(*secs).map_err(|e| self.fail(e)),
            Arg::Str(text) => lb_model::units::parse_rfc3339(text).map_err(|e| self.fail(e)),
            Arg::Regex(_) => Err(self.fail(format!(
                "argument {} must be Unix seconds or an RFC 3339 string",
                i + 1
            ))),
        }
    }

    /// Every argument as a string.
    pub fn strings(&self) -> Result<Vec<String>, RouteError> {
        (0..self.len())
            .map(|i| self.str(i).map(str::to_owned))
            .collect()
    }
}

fn kind(arg: &Arg) -> &'static str {
    match arg {
        Arg::Str(_) => "a string",
        Arg::Regex(_) => "a regexp",
        Arg::Num(_) => "a number",
    }
}
