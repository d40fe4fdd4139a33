//! Why route text was refused: every syntax error and every route that does not
//! compile, each with its position, so an operator fixes a file in one pass.

use crate::eskip::{self, Pos};

/// A route that does not compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {}, column {}: route {}: {message}", pos.line, pos.column, shown_id(route))]
pub struct RouteError {
    /// Where.
    pub pos: Pos,
    /// The route's id; empty for a text's only route written without one.
    pub route: String,
    /// What is wrong.
    pub message: String,
}

/// An id as errors show it; the route without an id is named as skipper does, `""`.
fn shown_id(id: &str) -> &str {
    if id.is_empty() { "\"\"" } else { id }
}

/// One thing wrong with a route text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteProblem {
    /// A syntax error or a check skipper makes while parsing.
    #[error(transparent)]
    Syntax(#[from] eskip::ParseError),
    /// A route that parsed but is wrong.
    #[error(transparent)]
    Route(#[from] RouteError),
}

impl RouteProblem {
    /// Where in the text.
    pub fn pos(&self) -> Pos {
        match self {
            RouteProblem::Syntax(e) => e.pos,
            RouteProblem::Route(e) => e.pos,
        }
    }
}

/// Why route text was refused: every problem, in text order, never none. Displayed
/// one problem a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutesError(Vec<RouteProblem>);

impl RoutesError {
    /// The problems sorted by position, or `None` if there are none.
    pub fn new(mut problems: Vec<RouteProblem>) -> Option<Self> {
        problems.sort_by_key(|p| (p.pos().line, p.pos().column));
        (!problems.is_empty()).then_some(Self(problems))
    }

    /// The problems, in text order.
    pub fn problems(&self) -> &[RouteProblem] {
        &self.0
    }
}

impl std::fmt::Display for RoutesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            p.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for RoutesError {}
