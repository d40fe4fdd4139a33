//! The eskip route syntax (skipper's), the subset in `shared/L7-SPEC.md`:
//!
//! ```text
//! // a comment
//! id: Pred1("a") && Pred2(/re/) -> filter1(1) -> filter2() -> BACKEND;
//! ```
//!
//! This module only parses: names and argument counts are checked when the routes are
//! compiled ([`crate::routes`]), where an unknown predicate or filter is an error
//! with its position too. Every error names the line and column and what was expected.

mod lexer;
#[cfg(test)]
mod tests;

use lexer::Token;

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
    /// The route id.
    pub id: String,
    /// Predicates; empty for `*`.
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

/// Parses a whole route document.
///
/// # Errors
/// The first syntax error, with its position.
pub fn parse(text: &str) -> Result<Vec<Route>, ParseError> {
    let tokens = lexer::tokens(text)?;
    let mut p = Parser { tokens, at: 0 };
    let mut routes = Vec::new();
    while p.peek() != &Token::Eof {
        routes.push(p.route()?);
    }
    Ok(routes)
}

struct Parser {
    tokens: Vec<(Token, Pos)>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.at.min(self.tokens.len() - 1)].0
    }

    fn pos(&self) -> Pos {
        self.tokens[self.at.min(self.tokens.len() - 1)].1
    }

    fn next(&mut self) -> (Token, Pos) {
        let t = self.tokens[self.at.min(self.tokens.len() - 1)].clone();
        self.at += 1;
        t
    }

    fn fail<T>(&self, expected: &str) -> Result<T, ParseError> {
        Err(ParseError::at(self.pos(), expected, self.peek().describe()))
    }

    fn expect(&mut self, want: &Token, expected: &str) -> Result<(), ParseError> {
        if self.peek() == want {
            self.at += 1;
            Ok(())
        } else {
            self.fail(expected)
        }
    }

    fn route(&mut self) -> Result<Route, ParseError> {
        let pos = self.pos();
        let Token::Ident(id) = self.peek().clone() else {
            return self.fail("a route id");
        };
        self.at += 1;
        self.expect(&Token::Colon, "`:` after the route id")?;
        let mut predicates = Vec::new();
        if self.peek() == &Token::Star {
            self.at += 1;
        } else {
            predicates.push(self.call("a predicate or `*`")?);
            while self.peek() == &Token::And {
                self.at += 1;
                predicates.push(self.call("a predicate after `&&`")?);
            }
        }
        self.expect(&Token::Arrow, "`&&` or `->`")?;
        let mut filters = Vec::new();
        loop {
            let backend_pos = self.pos();
            match self.peek().clone() {
                Token::Ident(_) => {
                    filters.push(self.call("a filter")?);
                    self.expect(&Token::Arrow, "`->` after a filter")?;
                }
                Token::Str(url) => {
                    self.at += 1;
                    return self.end(
                        id,
                        predicates,
                        filters,
                        Backend::Network(url),
                        backend_pos,
                        pos,
                    );
                }
                Token::Lt => {
                    let backend = self.angle()?;
                    return self.end(id, predicates, filters, backend, backend_pos, pos);
                }
                _ => return self.fail("a filter or a backend (\"http://…\", <shunt>, <…>)"),
            }
        }
    }

    fn end(
        &mut self,
        id: String,
        predicates: Vec<Call>,
        filters: Vec<Call>,
        backend: Backend,
        backend_pos: Pos,
        pos: Pos,
    ) -> Result<Route, ParseError> {
        self.expect(&Token::Semicolon, "`;` after the backend")?;
        Ok(Route {
            id,
            predicates,
            filters,
            backend,
            backend_pos,
            pos,
        })
    }

    /// `<shunt>`, `<algorithm, "url", …>`, `<"url", …>`, `<algorithm>`.
    fn angle(&mut self) -> Result<Backend, ParseError> {
        self.at += 1;
        let mut algorithm = None;
        let mut endpoints = Vec::new();
        match self.next() {
            (Token::Ident(name), pos) => {
                if name == "shunt" {
                    self.expect(&Token::Gt, "`>` after shunt")?;
                    return Ok(Backend::Shunt);
                }
                if name == "loopback" || name == "dynamic" {
                    return Err(ParseError::at(
                        pos,
                        "<shunt> or a load-balanced backend",
                        format!("<{name}> (not supported)"),
                    ));
                }
                algorithm = Some(name);
            }
            (Token::Str(url), _) => endpoints.push(url),
            (t, pos) => {
                return Err(ParseError::at(
                    pos,
                    "`shunt`, an algorithm or an endpoint URL",
                    t.describe(),
                ));
            }
        }
        loop {
            match self.next() {
                (Token::Gt, _) => {
                    return Ok(Backend::LoadBalanced {
                        algorithm,
                        endpoints,
                    });
                }
                (Token::Comma, _) => match self.next() {
                    (Token::Str(url), _) => endpoints.push(url),
                    (t, pos) => {
                        return Err(ParseError::at(pos, "an endpoint URL string", t.describe()));
                    }
                },
                (t, pos) => return Err(ParseError::at(pos, "`,` or `>`", t.describe())),
            }
        }
    }

    fn call(&mut self, what: &str) -> Result<Call, ParseError> {
        let pos = self.pos();
        let Token::Ident(name) = self.peek().clone() else {
            return self.fail(what);
        };
        self.at += 1;
        self.expect(&Token::Open, &format!("`(` after {name}"))?;
        let mut args = Vec::new();
        if self.peek() == &Token::Close {
            self.at += 1;
            return Ok(Call { name, args, pos });
        }
        loop {
            let arg = match self.next() {
                (Token::Str(s), _) => Arg::Str(s),
                (Token::Regex(r), _) => Arg::Regex(r),
                (Token::Num(n), _) => Arg::Num(n),
                (t, pos) => {
                    return Err(ParseError::at(
                        pos,
                        "an argument (string, /regexp/ or number)",
                        t.describe(),
                    ));
                }
            };
            args.push(arg);
            match self.next() {
                (Token::Comma, _) => {}
                (Token::Close, _) => return Ok(Call { name, args, pos }),
                (t, pos) => return Err(ParseError::at(pos, "`,` or `)`", t.describe())),
            }
        }
    }
}

/// A string as an eskip literal that the lexer reads back as exactly that string: `"`
/// and `\` escaped, line feed, tab and carriage return as `\n`, `\t` and `\r`, every
/// other character as itself (the lexer knows no other escape, so Rust's `{:?}`
/// escapes such as `\u{..}` or `\0` would read back as different text).
struct Quoted<'a>(&'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\t' => f.write_str("\\t")?,
                '\r' => f.write_str("\\r")?,
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }
}

impl std::fmt::Display for Arg {
    /// The argument as eskip writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arg::Str(s) => Quoted(s).fmt(f),
            Arg::Regex(r) => write!(f, "/{}/", r.replace('/', "\\/")),
            Arg::Num(n) => write!(f, "{n}"),
        }
    }
}

impl std::fmt::Display for Call {
    /// `Name(arg, …)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}(", self.name)?;
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}")?;
        }
        f.write_str(")")
    }
}

impl std::fmt::Display for Backend {
    /// The backend as eskip writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Network(url) => Quoted(url).fmt(f),
            Backend::Shunt => f.write_str("<shunt>"),
            Backend::LoadBalanced {
                algorithm,
                endpoints,
            } => {
                f.write_str("<")?;
                if let Some(a) = algorithm {
                    f.write_str(a)?;
                }
                for (i, e) in endpoints.iter().enumerate() {
                    if i > 0 || algorithm.is_some() {
                        f.write_str(", ")?;
                    }
                    Quoted(e).fmt(f)?;
                }
                f.write_str(">")
            }
        }
    }
}

impl std::fmt::Display for Route {
    /// The route in canonical eskip form, one line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.id)?;
        if self.predicates.is_empty() {
            f.write_str("*")?;
        }
        for (i, p) in self.predicates.iter().enumerate() {
            if i > 0 {
                f.write_str(" && ")?;
            }
            write!(f, "{p}")?;
        }
        for filter in &self.filters {
            write!(f, " -> {filter}")?;
        }
        write!(f, " -> {};", self.backend)
    }
}
