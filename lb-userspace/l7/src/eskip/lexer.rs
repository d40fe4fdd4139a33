//! Tokens of the eskip route syntax, each with the line and column it starts at, read
//! by skipper's rules (`eskip/lexer.go`):
//!
//! - white space is ASCII space, tab, line feed, vertical tab, form feed and carriage
//!   return; `//` starts a comment to the end of the line;
//! - a name is an ASCII letter or `_`, then ASCII letters, digits and `_` (no `-`);
//! - a number is an optional `-`, digits and at most one `.`, not ending in `.`
//!   (`.5` and `-.5` are numbers; there is no exponent form: `1e3` is `1` then `e3`);
//! - strings are in `"…"` or `` `…` ``; `\a \b \f \n \r \t \v`, `\\` and a backslash
//!   before the string's own quote are escapes, any other backslash stays as written;
//! - a `/…/` regexp ends at the first `/` that is neither escaped nor inside a `[…]`
//!   class; `\/` is read as `/` and `\\` as `\`, any other backslash stays;
//! - `<shunt>`, `<loopback>`, `<dynamic>` and `<forward>` are single tokens, written
//!   without spaces.
//!
//! A character that starts no token, or a token left unfinished, is an error; the
//! lexer records it, puts a [`Token::Invalid`] in its place and reads on, so the
//! parser can drop that route and still find the errors after it.

use super::{ParseError, Pos};

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub enum Token {
    /// A route id, predicate, filter or algorithm name.
    Ident(String),
    /// A quoted string, escapes resolved.
    Str(String),
    /// A `/.../` regular expression, `\/` and `\\` resolved.
    Regex(String),
    /// A number.
    Num(f64),
    /// `:`
    Colon,
    /// `&&`
    And,
    /// `->`
    Arrow,
    /// `;`
    Semicolon,
    /// `(`
    Open,
    /// `)`
    Close,
    /// `,`
    Comma,
    /// `*`
    Star,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<shunt>`
    Shunt,
    /// `<loopback>`, `<dynamic>` or `<forward>`: skipper's, which we do not serve.
    Unsupported(&'static str),
    /// Text that is no token; its error is already recorded.
    Invalid,
    /// End of input.
    Eof,
}

impl Token {
    /// How an error message shows this token.
    pub fn describe(&self) -> String {
        match self {
            Token::Ident(s) => format!("`{s}`"),
            Token::Str(s) => format!("string {:?}", s),
            Token::Regex(s) => format!("regexp /{s}/"),
            Token::Num(n) => format!("number {n}"),
            Token::Colon => "`:`".into(),
            Token::And => "`&&`".into(),
            Token::Arrow => "`->`".into(),
            Token::Semicolon => "`;`".into(),
            Token::Open => "`(`".into(),
            Token::Close => "`)`".into(),
            Token::Comma => "`,`".into(),
            Token::Star => "`*`".into(),
            Token::Lt => "`<`".into(),
            Token::Gt => "`>`".into(),
            Token::Shunt => "`<shunt>`".into(),
            Token::Unsupported(name) => format!("`{name}`"),
            Token::Invalid => "invalid text".into(),
            Token::Eof => "end of input".into(),
        }
    }
}

/// The backends skipper lexes as one token each.
const ANGLE_WORDS: [(&str, Token); 4] = [
    ("<shunt>", Token::Shunt),
    ("<loopback>", Token::Unsupported("<loopback>")),
    ("<dynamic>", Token::Unsupported("<dynamic>")),
    ("<forward>", Token::Unsupported("<forward>")),
];

/// Splits route text into tokens, the last one [`Token::Eof`], and the lexical
/// errors found on the way (each also a [`Token::Invalid`] in the list).
pub fn tokens(text: &str) -> (Vec<(Token, Pos)>, Vec<ParseError>) {
    let mut lexer = Lexer {
        chars: text.chars().collect(),
        at: 0,
        pos: Pos { line: 1, column: 1 },
        errors: Vec::new(),
    };
    let mut out = Vec::new();
    loop {
        lexer.skip_blank();
        let pos = lexer.pos;
        let Some(c) = lexer.peek(0) else {
            out.push((Token::Eof, pos));
            return (out, lexer.errors);
        };
        let token = match c {
            ':' => lexer.one(Token::Colon),
            ';' => lexer.one(Token::Semicolon),
            '(' => lexer.one(Token::Open),
            ')' => lexer.one(Token::Close),
            ',' => lexer.one(Token::Comma),
            '*' => lexer.one(Token::Star),
            '>' => lexer.one(Token::Gt),
            '<' => lexer.angle(),
            '&' if lexer.peek(1) == Some('&') => lexer.two(Token::And),
            '-' if lexer.peek(1) == Some('>') => lexer.two(Token::Arrow),
            '-' if lexer.peek(1).is_some_and(is_number_char) => lexer.number(pos),
            '"' | '`' => lexer.string(c, pos),
            '/' => lexer.regex(pos),
            c if is_number_char(c) => lexer.number(pos),
            c if c.is_ascii_alphabetic() || c == '_' => lexer.ident(),
            _ => lexer.invalid(pos),
        };
        out.push((token, pos));
    }
}

fn is_number_char(c: char) -> bool {
    c.is_ascii_digit() || c == '.'
}

/// Skipper's white space: the ASCII characters Go's `unicode.IsSpace` names, no
/// others (a no-break space is an error, as in skipper, which reads bytes).
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\n' | '\t' | '\x0b' | '\x0c' | '\r')
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    pos: Pos,
    errors: Vec<ParseError>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.at += 1;
        if c == '\n' {
            self.pos.line += 1;
            self.pos.column = 1;
        } else {
            self.pos.column += 1;
        }
        Some(c)
    }

    fn one(&mut self, t: Token) -> Token {
        self.bump();
        t
    }

    fn two(&mut self, t: Token) -> Token {
        self.bump();
        self.bump();
        t
    }

    fn fail(&mut self, pos: Pos, expected: &str, found: impl Into<String>) -> Token {
        self.errors.push(ParseError::at(pos, expected, found));
        Token::Invalid
    }

    fn skip_blank(&mut self) {
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(c), _) if is_blank(c) => {
                    self.bump();
                }
                (Some('/'), Some('/')) => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                _ => return,
            }
        }
    }

    /// A run of characters that start no token, as one error.
    fn invalid(&mut self, pos: Pos) -> Token {
        let mut run = String::new();
        while let Some(c) = self.peek(0) {
            let starts_token = is_blank(c)
                || c.is_ascii_alphanumeric()
                || ":;(),*<>\"`/._".contains(c)
                || (c == '&' && self.peek(1) == Some('&'))
                || (c == '-' && self.peek(1).is_some_and(|n| n == '>' || is_number_char(n)));
            if starts_token && !run.is_empty() {
                break;
            }
            run.push(c);
            self.bump();
        }
        self.fail(
            pos,
            "a route (`id: predicates -> filters -> backend;`)",
            format!("`{run}`"),
        )
    }

    fn angle(&mut self) -> Token {
        for (word, token) in ANGLE_WORDS {
            let n = word.chars().count();
            if self.chars[self.at..]
                .iter()
                .take(n)
                .copied()
                .eq(word.chars())
            {
                for _ in 0..n {
                    self.bump();
                }
                return token;
            }
        }
        self.one(Token::Lt)
    }

    fn string(&mut self, quote: char, start: Pos) -> Token {
        let closing = if quote == '"' {
            "a closing `\"`"
        } else {
            "a closing backtick"
        };
        self.bump();
        let mut s = String::new();
        loop {
            match self.bump() {
                None => {
                    return self.fail(start, closing, "end of input");
                }
                Some(c) if c == quote => return Token::Str(s),
                Some('\\') => match self.bump() {
                    Some('a') => s.push('\x07'),
                    Some('b') => s.push('\x08'),
                    Some('f') => s.push('\x0c'),
                    Some('n') => s.push('\n'),
                    Some('r') => s.push('\r'),
                    Some('t') => s.push('\t'),
                    Some('v') => s.push('\x0b'),
                    Some(c) if c == quote || c == '\\' => s.push(c),
                    Some(c) => {
                        s.push('\\');
                        s.push(c);
                    }
                    None => {
                        return self.fail(start, closing, "end of input");
                    }
                },
                Some(c) => s.push(c),
            }
        }
    }

    fn regex(&mut self, start: Pos) -> Token {
        self.bump();
        let mut s = String::new();
        let mut in_class = false;
        loop {
            match self.bump() {
                None => {
                    return self.fail(start, "a closing `/` of the regexp", "end of input");
                }
                Some('/') if !in_class => return Token::Regex(s),
                Some('\\') => match self.bump() {
                    Some(c @ ('/' | '\\')) => s.push(c),
                    Some(c) => {
                        s.push('\\');
                        s.push(c);
                    }
                    None => {
                        return self.fail(start, "a closing `/` of the regexp", "end of input");
                    }
                },
                Some(c) => {
                    match c {
                        '[' => in_class = true,
                        ']' => in_class = false,
                        _ => {}
                    }
                    s.push(c);
                }
            }
        }
    }

    fn number(&mut self, start: Pos) -> Token {
        let mut s = String::new();
        if self.peek(0) == Some('-') {
            s.push('-');
            self.bump();
        }
        let mut dot = false;
        while let Some(c) = self.peek(0) {
            if c.is_ascii_digit() || (c == '.' && !dot) {
                dot |= c == '.';
                s.push(c);
                self.bump();
            } else {
                break;
            }
        }
        if s.ends_with('.') {
            return self.fail(start, "a digit after `.`", format!("`{s}`"));
        }
        match s.parse() {
            Ok(n) => Token::Num(n),
            Err(_) => self.fail(start, "a number", format!("`{s}`")),
        }
    }

    fn ident(&mut self) -> Token {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            if c.is_ascii_alphanumeric() || c == '_' {
                s.push(c);
                self.bump();
            } else {
                break;
            }
        }
        Token::Ident(s)
    }
}
