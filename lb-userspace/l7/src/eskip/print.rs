//! Routes printed back as eskip: the canonical one-line form `lbctl routes` shows and
//! that the lexer reads back as the same route (see the round-trip property in the
//! tests).

use std::fmt::{self, Display, Formatter, Write as _};

use super::{Arg, Backend, Call, Route};

/// A string as an eskip literal that the lexer reads back as exactly that string: `"`
/// and `\` escaped, and the control characters the lexer has escapes for (skipper's
/// printer does the same); every other character as itself.
struct Quoted<'a>(&'a str);

impl Display for Quoted<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\x07' => f.write_str("\\a")?,
                '\x08' => f.write_str("\\b")?,
                '\x0c' => f.write_str("\\f")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\x0b' => f.write_str("\\v")?,
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }
}

/// A regexp as an eskip literal the lexer reads back as the same text. The lexer
/// keeps `\x` as written for any `x` but `/` and `\`, and so does the printer: an
/// escape such as `\[` stays as it is (printed `\\[`, it would read back the same
/// but open a `[…]` class, inside which a `/` does not end the regexp). A bare `/`,
/// and a `\` before `/` or `\` or at the end, are escaped. `\]` inside a class is
/// printed `\\]`, which reads back the same and closes the class, so the closing `/`
/// is seen. Only a regexp with a `[` that no later `]` closes cannot be written in
/// eskip (in skipper neither: the class would swallow the closing `/`).
struct Slashed<'a>(&'a str);

impl Display for Slashed<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_char('/')?;
        let mut in_class = false;
        let mut chars = self.0.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek().copied()) {
                ('/', _) => f.write_str("\\/")?,
                ('[', _) => {
                    in_class = true;
                    f.write_char('[')?;
                }
                (']', _) => {
                    in_class = false;
                    f.write_char(']')?;
                }
                ('\\', None) => f.write_str("\\\\")?,
                ('\\', Some(next)) => {
                    chars.next();
                    match next {
                        '/' => f.write_str("\\\\\\/")?,
                        '\\' => f.write_str("\\\\\\\\")?,
                        ']' if in_class => {
                            in_class = false;
                            f.write_str("\\\\]")?;
                        }
                        c => {
                            f.write_char('\\')?;
                            f.write_char(c)?;
                        }
                    }
                }
                (c, _) => f.write_char(c)?,
            }
        }
        f.write_char('/')
    }
}

impl Display for Arg {
    /// The argument as eskip writes it.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Str(s) => Quoted(s).fmt(f),
            Arg::Regex(r) => Slashed(r).fmt(f),
            Arg::Num(n) => write!(f, "{n}"),
        }
    }
}

impl Display for Call {
    /// `Name(arg, …)`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
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

impl Display for Backend {
    /// The backend as eskip writes it.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
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

impl Display for Route {
    /// The route in canonical eskip form, one line: `id: … -> backend;`, or for the
    /// route without an id (which must be a text's only route, with no `;`)
    /// `… -> backend`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if !self.id.is_empty() {
            write!(f, "{}: ", self.id)?;
        }
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
        write!(f, " -> {}", self.backend)?;
        if self.id.is_empty() {
            Ok(())
        } else {
            f.write_str(";")
        }
    }
}
