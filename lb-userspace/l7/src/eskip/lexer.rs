//! Tokens of the eskip route syntax, each with the line and column it starts at.

use super::{ParseError, Pos};

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub enum Token {
    /// A route id, predicate, filter or algorithm name.
    Ident(String),
    /// A double-quoted string, escapes resolved.
    Str(String),
    /// A `/.../` regular expression, `\/` resolved to `/`.
    Regex(String),
    /// An integer or float.
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
    /// End of input.
    Eof,
}

impl Token {
    /// How an error message shows this token.
    pub fn describe(&self) -> String {
        match self {
            Token::Ident(s) => format!("`{s}`"),
            Token::Str(s) => format!("string \"{s}\""),
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
            Token::Eof => "end of input".into(),
        }
    }
}

/// Splits route text into tokens; comments (`//` to the end of the line) and white
/// space are skipped.
pub fn tokens(text: &str) -> Result<Vec<(Token, Pos)>, ParseError> {
    let mut lexer = Lexer {
        chars: text.chars().collect(),
        at: 0,
        pos: Pos { line: 1, column: 1 },
    };
    let mut out = Vec::new();
    loop {
        lexer.skip_blank();
        let pos = lexer.pos;
        let Some(c) = lexer.peek(0) else {
            out.push((Token::Eof, pos));
            return Ok(out);
        };
        let token = match c {
            ':' => lexer.one(Token::Colon),
            ';' => lexer.one(Token::Semicolon),
            '(' => lexer.one(Token::Open),
            ')' => lexer.one(Token::Close),
            ',' => lexer.one(Token::Comma),
            '*' => lexer.one(Token::Star),
            '<' => lexer.one(Token::Lt),
            '>' => lexer.one(Token::Gt),
            '&' if lexer.peek(1) == Some('&') => lexer.two(Token::And),
            '-' if lexer.peek(1) == Some('>') => lexer.two(Token::Arrow),
            '"' => lexer.string(pos)?,
            '/' => lexer.regex(pos)?,
            c if c.is_ascii_digit() || c == '-' || c == '.' => lexer.number(pos)?,
            c if c.is_alphabetic() || c == '_' => lexer.ident(),
            other => {
                return Err(ParseError::at(
                    pos,
                    "a route (`id: predicates -> filters -> backend;`)",
                    format!("`{other}`"),
                ));
            }
        };
        out.push((token, pos));
    }
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    pos: Pos,
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

    fn skip_blank(&mut self) {
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(c), _) if c.is_whitespace() => {
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

    fn string(&mut self, start: Pos) -> Result<Token, ParseError> {
        self.bump();
        let mut s = String::new();
        loop {
            match self.bump() {
                None => return Err(ParseError::at(start, "a closing `\"`", "end of input")),
                Some('"') => return Ok(Token::Str(s)),
                Some('\\') => match self.bump() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('r') => s.push('\r'),
                    Some(c) => s.push(c),
                    None => return Err(ParseError::at(start, "a closing `\"`", "end of input")),
                },
                Some(c) => s.push(c),
            }
        }
    }

    fn regex(&mut self, start: Pos) -> Result<Token, ParseError> {
        self.bump();
        let mut s = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => {
                    return Err(ParseError::at(
                        start,
                        "a closing `/` of the regexp",
                        "end of line",
                    ));
                }
                Some('/') => return Ok(Token::Regex(s)),
                Some('\\') if self.peek(0) == Some('/') => {
                    self.bump();
                    s.push('/');
                }
                Some('\\') => {
                    s.push('\\');
                    if let Some(c) = self.bump() {
                        s.push(c);
                    }
                }
                Some(c) => s.push(c),
            }
        }
    }

    fn number(&mut self, start: Pos) -> Result<Token, ParseError> {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            if c.is_ascii_digit() || c == '.' || (c == '-' && s.is_empty()) || c == 'e' {
                s.push(c);
                self.bump();
            } else {
                break;
            }
        }
        s.parse()
            .map(Token::Num)
            .map_err(|_| ParseError::at(start, "a number", format!("`{s}`")))
    }

    fn ident(&mut self) -> Token {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            if c.is_alphanumeric() || c == '_' || c == '-' && self.peek(1) != Some('>') {
                s.push(c);
                self.bump();
            } else {
                break;
            }
        }
        Token::Ident(s)
    }
}
