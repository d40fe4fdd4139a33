//! The eskip route syntax, exactly as skipper reads it (`eskip/lexer.go`,
//! `eskip/parser.y`, `eskip/eskip.go`; the subset of backends in
//! `shared/L7-SPEC.md`):
//!
//! ```text
//! // a comment
//! id: Pred1("a") && Pred2(/re/) -> filter1(1) -> filter2() -> BACKEND;
//! ```
//!
//! `;` separates routes (one after the last is optional), and a text may be a single
//! route without an id, whose id is then empty, as in skipper. [`lexer`] has the token
//! rules, [`parser`] the grammar and its error recovery, [`checks`] what skipper
//! checks while parsing (duplicate `Path`, `Method` and `Header`, the built-in
//! predicates' arguments, mixed protocols in a load-balanced backend), and `print`
//! writes routes back as eskip.
//!
//! Every error in a text is reported, each with its line, column and what was
//! expected. Names of predicates and filters are checked when the routes are compiled
//! ([`crate::routes`]), where an unknown one is an error with its position too.
//!
//! Where we differ from skipper: `<algorithm>` without URLs is a backend (the
//! service's own endpoints; skipper wants at least one URL), and `<loopback>`,
//! `<dynamic>` and `<forward>` are refused as not supported.

mod checks;
mod lexer;
mod parser;
mod print;
#[cfg(test)]
mod skipper_cases;
#[cfg(test)]
mod tests;

/// A position in the route text, both 1-based.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// Line.
    pub line: usize,
    /// Column, in characters.
    pub column: usize,
}

/// Why route text did not parse, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {}, column {}: expected {expected}, found {found}", pos.line, pos.column)]
pub struct ParseError {
    /// Where.
    pub pos: Pos,
    /// What the parser wanted there.
    pub expected: String,
    /// What it got.
    pub found: String,
}

impl ParseError {
    /// An error at `pos`.
    pub fn at(pos: Pos, expected: impl Into<String>, found: impl Into<String>) -> Self {
        Self {
            pos,
            expected: expected.into(),
            found: found.into(),
        }
    }
}

/// One argument of a predicate or filter.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// `"text"`
    Str(String),
    /// `/regexp/`
    Regex(String),
    /// `42`, `1.5`
    Num(f64),
}

/// A predicate or filter call: `Name(args…)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The name as written.
    pub name: String,
    /// The arguments in order.
    pub args: Vec<Arg>,
    /// Where the name starts.
    pub pos: Pos,
}

/// Where a route sends its requests.
#[derive(Clone, Debug, PartialEq)]
pub enum Backend {
    /// `"http://host:port"`
    Network(String),
    /// `<shunt>`: answered by the filters (404 unless one set a status or body).
    Shunt,
    /// `<algorithm, "url", …>` or `<"url", …>`; no URL means the service's own
    /// endpoints (from the config, EndpointSlices or etcd).
    LoadBalanced {
        /// The algorithm's name, if given.
        algorithm: Option<String>,
        /// Endpoint URLs.
        endpoints: Vec<String>,
    },
}

/// One parsed route.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The route id; empty for the one route of a text that has no id.
    pub id: String,
    /// Predicates, without `*` and `Any()` (which match anything); empty for `*`.
    pub predicates: Vec<Call>,
    /// Filters in order.
    pub filters: Vec<Call>,
    /// The backend.
    pub backend: Backend,
    /// Where the backend starts (for its errors).
    pub backend_pos: Pos,
    /// Where the route starts.
    pub pos: Pos,
}

/// Every syntax error of a route text, in text order; never empty. Displayed one
/// error a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseErrors(Vec<ParseError>);

impl ParseErrors {
    /// The errors, in text order.
    pub fn errors(&self) -> &[ParseError] {
        &self.0
    }

    /// The first error.
    pub fn first(&self) -> &ParseError {
        &self.0[0]
    }
}

impl std::fmt::Display for ParseErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            e.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseErrors {}

/// What a route text holds: the routes that parsed and passed skipper's checks, and
/// the errors of the rest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// The good routes, in text order.
    pub routes: Vec<Route>,
    /// Every error, in text order; a route with one is not in `routes`.
    pub errors: Vec<ParseError>,
}

/// Parses a whole route document.
///
/// # Errors
/// Every syntax error and every failed parse-time check, each with its position.
pub fn parse(text: &str) -> Result<Vec<Route>, ParseErrors> {
    let Parsed { routes, errors } = parse_all(text);
    if errors.is_empty() {
        Ok(routes)
    } else {
        Err(ParseErrors(errors))
    }
}

/// Parses a whole route document and keeps going past errors: the routes that are
/// good are returned beside the errors, so a caller can check them further and report
/// those problems too.
pub fn parse_all(text: &str) -> Parsed {
    let (parsed, mut errors) = parser::document(text);
    let mut routes = Vec::with_capacity(parsed.len());
    for r in parsed {
        match checks::route(r) {
            Ok(r) => routes.push(r),
            Err(e) => errors.extend(e),
        }
    }
    errors.sort_by_key(|e| (e.pos.line, e.pos.column));
    Parsed { routes, errors }
}
