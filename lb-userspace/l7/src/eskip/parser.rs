//! The eskip grammar (skipper's `eskip/parser.y`) over the lexer's tokens, with error
//! recovery so one text yields all its syntax errors:
//!
//! ```text
//! document   := route                       // one route, no id, no `;`
//!             | (routedef? ";")* routedef?  // `;` separates; empty is fine
//! routedef   := id ":" route
//! route      := predicates "->" (filter "->")* backend
//! predicates := predicate ("&&" predicate)*
//! predicate  := "*" | name "(" args ")"
//! filter     := name "(" args ")"
//! args       := arg? ("," arg)*             // skipper's yacc rule allows `f(, 1)`
//! backend    := string | "<shunt>" | "<" (name ",")? string ("," string)* ">"
//!             | "<" name ">"                // ours: the service's own endpoints
//! ```
//!
//! Recovery: a route with an error is dropped and parsing resumes after the next `;`
//! or at the next `id:`, whichever comes first. Any `;` will do, whatever brackets
//! are open: valid eskip has `;` only between routes (inside strings it is part of
//! the string token), and the usual mistake that leaves a bracket open, a missing `)`,
//! should not hide the routes after it. `id:` is a safe resume point too, since a `:`
//! appears nowhere else in a route; it catches a missing `;`.

use super::{
    Arg, Backend, Call, ParseError, Pos, Route,
    lexer::{self, Token},
};

/// The routes that parsed and the errors of those that did not, in text order.
pub fn document(text: &str) -> (Vec<Route>, Vec<ParseError>) {
    let (tokens, errors) = lexer::tokens(text);
    let mut p = Parser {
        tokens,
        at: 0,
        errors,
    };
    let routes = p.document();
    let mut errors = p.errors;
    errors.sort_by_key(|e| (e.pos.line, e.pos.column));
    (routes, errors)
}

/// A route failed; its error (if any: an [`Token::Invalid`] already has one) is
/// recorded.
struct Failed;

type Step<T> = Result<T, Failed>;

struct Parser {
    tokens: Vec<(Token, Pos)>,
    at: usize,
    errors: Vec<ParseError>,
}

impl Parser {
    fn peek_at(&self, ahead: usize) -> &(Token, Pos) {
        &self.tokens[(self.at + ahead).min(self.tokens.len() - 1)]
    }

    fn peek(&self) -> &Token {
        &self.peek_at(0).0
    }

    fn pos(&self) -> Pos {
        self.peek_at(0).1
    }

    fn bump(&mut self) -> (Token, Pos) {
        let t = self.peek_at(0).clone();
        self.at = (self.at + 1).min(self.tokens.len() - 1);
        t
    }

    fn at_route_id(&self) -> bool {
        matches!(self.peek(), Token::Ident(_)) && self.peek_at(1).0 == Token::Colon
    }

    /// Records that `expected` was wanted where the next token is (nothing new for an
    /// invalid token, whose error the lexer recorded).
    fn fail<T>(&mut self, expected: &str) -> Step<T> {
        if self.peek() != &Token::Invalid {
            let found = self.peek().describe();
            self.errors
                .push(ParseError::at(self.pos(), expected, found));
        }
        Err(Failed)
    }

    fn expect(&mut self, want: &Token, expected: &str) -> Step<()> {
        if self.peek() == want {
            self.bump();
            Ok(())
        } else {
            self.fail(expected)
        }
    }

    /// Skips to just after the next `;` or to the next `id:`, always moving on.
    fn recover(&mut self, from: usize) {
        if self.at == from {
            self.bump();
        }
        loop {
            match self.peek() {
                Token::Eof => return,
                Token::Semicolon => {
                    self.bump();
                    return;
                }
                _ if self.at_route_id() => return,
                _ => {
                    self.bump();
                }
            }
        }
    }

    fn document(&mut self) -> Vec<Route> {
        let mut routes = Vec::new();
        if !matches!(self.peek(), Token::Eof | Token::Semicolon) && !self.at_route_id() {
            let (from, pos) = (self.at, self.pos());
            match self.route(String::new(), pos, true) {
                Ok(route) if self.peek() == &Token::Eof => return vec![route],
                Ok(_) => {
                    let _ = self.fail::<()>(
                        "end of input: a route without an id must be the whole text \
                         (give it an id, `id: …`, to add routes)",
                    );
                    self.recover(from);
                }
                Err(Failed) => self.recover(from),
            }
        }
        loop {
            let from = self.at;
            match self.peek() {
                Token::Eof => return routes,
                Token::Semicolon => {
                    self.bump();
                }
                _ => match self.routedef() {
                    Ok(route) => {
                        routes.push(route);
                        if !matches!(self.peek(), Token::Eof | Token::Semicolon) {
                            let _ = self.fail::<()>("`;` between routes");
                            self.recover(from);
                        }
                    }
                    Err(Failed) => self.recover(from),
                },
            }
        }
    }

    fn routedef(&mut self) -> Step<Route> {
        let pos = self.pos();
        let Token::Ident(id) = self.peek().clone() else {
            return self
                .fail("a route id (only a text of a single route may leave it out, `* -> …`)");
        };
        self.bump();
        self.expect(&Token::Colon, "`:` after the route id")?;
        self.route(id, pos, false)
    }

    /// `predicates -> filters -> backend`; `anonymous` when it is the text's only
    /// route, whose first name may be a route id missing its `:`.
    fn route(&mut self, id: String, pos: Pos, anonymous: bool) -> Step<Route> {
        let mut predicates = Vec::new();
        let mut first = true;
        loop {
            if self.peek() == &Token::Star {
                self.bump();
            } else {
                let what = if first {
                    "a predicate or `*`"
                } else {
                    "a predicate after `&&`"
                };
                let open = if first && anonymous {
                    "`(` after the predicate name, or `:` after a route id"
                } else {
                    "`(` after the predicate name"
                };
                predicates.push(self.call(what, open)?);
            }
            first = false;
            if self.peek() != &Token::And {
                break;
            }
            self.bump();
        }
        self.expect(&Token::Arrow, "`&&` or `->`")?;
        let mut filters = Vec::new();
        loop {
            let backend_pos = self.pos();
            let backend = match self.peek().clone() {
                Token::Ident(_) => {
                    filters.push(self.call("a filter", "`(` after the filter name")?);
                    self.expect(&Token::Arrow, "`->` after a filter")?;
                    continue;
                }
                Token::Str(url) => {
                    self.bump();
                    Backend::Network(url)
                }
                Token::Shunt => {
                    self.bump();
                    Backend::Shunt
                }
                Token::Lt => self.balanced()?,
                Token::Unsupported(name) => {
                    self.errors.push(ParseError::at(
                        backend_pos,
                        "<shunt> or a load-balanced backend",
                        format!("{name} (not supported)"),
                    ));
                    return Err(Failed);
                }
                _ => return self.fail("a filter or a backend (\"http://…\", <shunt>, <…>)"),
            };
            return Ok(Route {
                id,
                predicates,
                filters,
                backend,
                backend_pos,
                pos,
            });
        }
    }

    /// `<algorithm, "url", …>`, `<"url", …>` or `<algorithm>`.
    fn balanced(&mut self) -> Step<Backend> {
        self.bump();
        let mut algorithm = None;
        let mut endpoints = Vec::new();
        match self.peek().clone() {
            Token::Ident(name)
                if matches!(name.as_str(), "shunt" | "loopback" | "dynamic" | "forward") =>
            {
                return self.fail(&format!("<{name}> written without spaces, or an algorithm"));
            }
            Token::Ident(name) => {
                self.bump();
                algorithm = Some(name);
                match self.peek() {
                    Token::Gt => {}
                    Token::Comma => {
                        self.bump();
                        endpoints.push(self.endpoint()?);
                    }
                    _ => return self.fail("`,` or `>`"),
                }
            }
            Token::Str(_) => endpoints.push(self.endpoint()?),
            _ => return self.fail("an algorithm or an endpoint URL"),
        }
        loop {
            match self.peek() {
                Token::Gt => {
                    self.bump();
                    return Ok(Backend::LoadBalanced {
                        algorithm,
                        endpoints,
                    });
                }
                Token::Comma => {
                    self.bump();
                    endpoints.push(self.endpoint()?);
                }
                _ => return self.fail("`,` or `>`"),
            }
        }
    }

    fn endpoint(&mut self) -> Step<String> {
        match self.peek().clone() {
            Token::Str(url) => {
                self.bump();
                Ok(url)
            }
            _ => self.fail("an endpoint URL string"),
        }
    }

    fn call(&mut self, what: &str, open: &str) -> Step<Call> {
        let pos = self.pos();
        let Token::Ident(name) = self.peek().clone() else {
            return self.fail(what);
        };
        self.bump();
        self.expect(&Token::Open, open)?;
        let mut args = Vec::new();
        let mut want_arg = !matches!(self.peek(), Token::Close | Token::Comma);
        loop {
            if want_arg {
                let arg = match self.peek().clone() {
                    Token::Str(s) => Arg::Str(s),
                    Token::Regex(r) => Arg::Regex(r),
                    Token::Num(n) => Arg::Num(n),
                    _ => return self.fail("an argument (string, /regexp/ or number)"),
                };
                self.bump();
                args.push(arg);
            }
            match self.peek() {
                Token::Comma => {
                    self.bump();
                    want_arg = true;
                }
                Token::Close => {
                    self.bump();
                    return Ok(Call { name, args, pos });
                }
                _ => return self.fail("`,` or `)`"),
            }
        }
    }
}
