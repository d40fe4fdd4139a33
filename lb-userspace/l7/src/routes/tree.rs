//! The path tree: routes with a `Path` or `PathSubtree` found by walking the routing
//! path segment by segment, as skipper's `pathmux` tree does.
//!
//! A node is a position right after a `/` (a [`Dir`]) or right after a segment (a
//! [`Seg`]). At each `Dir` a lookup tries, in this order and backtracking when a
//! branch yields no route: the literal child equal to the next segment, then the
//! `:param` child (a non-empty segment), then the free wildcard, which takes the
//! whole non-empty rest. So an exact segment always beats a parameter, and both beat
//! a wildcard or a subtree, whatever the routes' other predicates, unless those fail.
//!
//! Every node end holds its candidate routes (`leaves`), already in priority order;
//! the caller's `accept` picks the first that satisfies the other predicates, or
//! refuses them all, and the walk backtracks.
//!
//! A `PathSubtree("/a")` is three entries, as in skipper: `/a`, `/a/` and the
//! wildcard below `/a/`. `Path("/a/*rest")` is that wildcard alone, so a free
//! wildcard never matches `/a/` or `/a`.
//!
//! Each tree node is visited at most once per lookup (its position in the request
//! path is fixed by its depth), so a lookup costs at most the tree's size and in
//! practice one child lookup per segment: a short sorted list, or a hash map where
//! a node has many literal children (a cluster's `/api/v1/<service>` level), because
//! a binary search over thousands of boxed strings misses the cache at every step.

use std::collections::HashMap;

use super::predicate::{PathMatch, Segment};

/// Route indices, in the order they are tried.
type Leaves = Box<[u32]>;

/// The compiled tree.
#[derive(Debug, Default)]
pub struct PathTree {
    root: Dir,
}

/// The position after a `/`.
#[derive(Debug, Default)]
struct Dir {
    /// Routes whose path ends here (with a trailing slash, or `/` itself).
    leaf: Leaves,
    /// Literal children.
    statics: Statics,
    /// The `:param` child.
    param: Option<Box<Seg>>,
    /// Routes whose free wildcard starts here.
    tail: Leaves,
}

/// Literal children by segment.
#[derive(Debug)]
enum Statics {
    /// Up to [`FEW`], sorted (for a stable `Debug`): smaller than a map and as
    /// fast to scan.
    Few(Box<[(Box<str>, Seg)]>),
    /// More.
    Many(HashMap<Box<str>, Seg>),
}

/// The most literal children kept in a sorted list.
const FEW: usize = 8;

impl Default for Statics {
    fn default() -> Self {
        Self::Few(Box::default())
    }
}

impl Statics {
    fn get(&self, segment: &str) -> Option<&Seg> {
        match self {
            Self::Few(list) => list.iter().find(|(k, _)| **k == *segment).map(|(_, s)| s),
            Self::Many(map) => map.get(segment),
        }
    }
}

/// The position after a segment.
#[derive(Debug, Default)]
struct Seg {
    /// Routes whose path ends here, without a trailing slash.
    end: Leaves,
    /// What follows a `/` after the segment.
    dir: Option<Box<Dir>>,
}

/// Where a tree entry ends.
#[derive(Clone, Copy)]
enum End {
    /// Right after the last segment.
    Segment,
    /// After a trailing slash.
    Dir,
    /// A free wildcard after the slash.
    Tail,
}

impl PathTree {
    /// Builds the tree from path predicates and their route indices, given in
    /// priority order: each node keeps its routes in the order they came.
    pub fn build<'a>(paths: impl IntoIterator<Item = (&'a PathMatch, u32)>) -> Self {
        let mut root = DirB::default();
        for (m, id) in paths {
            for (prefix, end) in entries(m) {
                root.insert(prefix, end, id);
            }
        }
        Self {
            root: root.freeze(),
        }
    }

    /// Walks `path` (a routing path) and returns what `accept` returns for the first
    /// candidate list it takes, trying candidates in the order of the module doc.
    /// `accept` sees each non-empty list of route indices at most once.
    pub fn lookup(
        &self,
        path: &str,
        accept: &mut impl FnMut(&[u32]) -> Option<u32>,
    ) -> Option<u32> {
        let rest = path.strip_prefix('/').unwrap_or(path);
        dir(&self.root, rest, accept)
    }
}

fn dir(d: &Dir, rest: &str, accept: &mut impl FnMut(&[u32]) -> Option<u32>) -> Option<u32> {
    if rest.is_empty() {
        return take(&d.leaf, accept);
    }
    let (token, after) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if let Some(child) = d.statics.get(token)
        && let Some(found) = seg(child, after, accept)
    {
        return Some(found);
    }
    if let Some(p) = &d.param
        && !token.is_empty()
        && let Some(found) = seg(p, after, accept)
    {
        return Some(found);
    }
    take(&d.tail, accept)
}

fn seg(s: &Seg, after: &str, accept: &mut impl FnMut(&[u32]) -> Option<u32>) -> Option<u32> {
    match after.strip_prefix('/') {
        None => take(&s.end, accept),
        Some(rest) => s.dir.as_ref().and_then(|d| dir(d, rest, accept)),
    }
}

fn take(leaves: &[u32], accept: &mut impl FnMut(&[u32]) -> Option<u32>) -> Option<u32> {
    if leaves.is_empty() {
        None
    } else {
        accept(leaves)
    }
}

/// The tree entries of a path predicate: a literal-and-parameter prefix and where it
/// ends.
fn entries(m: &PathMatch) -> Vec<(&[Segment], End)> {
    match m {
        PathMatch::Pattern { segments, slash } => match segments.split_last() {
            Some((Segment::Rest(_), init)) => vec![(init, End::Tail)],
            _ if *slash => vec![(segments.as_slice(), End::Dir)],
            _ => vec![(segments.as_slice(), End::Segment)],
        },
        PathMatch::Subtree { segments, .. } if segments.is_empty() => {
            vec![
                (segments.as_slice(), End::Dir),
                (segments.as_slice(), End::Tail),
            ]
        }
        PathMatch::Subtree { segments, .. } => vec![
            (segments.as_slice(), End::Segment),
            (segments.as_slice(), End::Dir),
            (segments.as_slice(), End::Tail),
        ],
    }
}

/// A [`Dir`] while the tree is built.
#[derive(Default)]
struct DirB {
    leaf: Vec<u32>,
    statics: HashMap<Box<str>, SegB>,
    param: Option<Box<SegB>>,
    tail: Vec<u32>,
}

/// A [`Seg`] while the tree is built.
#[derive(Default)]
struct SegB {
    end: Vec<u32>,
    dir: Option<Box<DirB>>,
}

impl DirB {
    fn insert(&mut self, prefix: &[Segment], end: End, id: u32) {
        let Some((last, init)) = prefix.split_last() else {
            // Only `/` and the root wildcard end at the root.
            match end {
                End::Tail => self.tail.push(id),
                End::Dir | End::Segment => self.leaf.push(id),
            }
            return;
        };
        let mut at = self;
        for s in init {
            at = at.child(s).dir.get_or_insert_default();
        }
        let seg = at.child(last);
        match end {
            End::Segment => seg.end.push(id),
            End::Dir => seg.dir.get_or_insert_default().leaf.push(id),
            End::Tail => seg.dir.get_or_insert_default().tail.push(id),
        }
    }

    fn child(&mut self, s: &Segment) -> &mut SegB {
        match s {
            Segment::Literal(l) => self.statics.entry(l.as_str().into()).or_default(),
            // A free wildcard is never inside a prefix (see `entries`).
            Segment::Param(_) | Segment::Rest(_) => self.param.get_or_insert_default(),
        }
    }

    fn freeze(self) -> Dir {
        let statics = if self.statics.len() <= FEW {
            let mut list: Vec<(Box<str>, Seg)> = self
                .statics
                .into_iter()
                .map(|(k, s)| (k, s.freeze()))
                .collect();
            list.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            Statics::Few(list.into())
        } else {
            Statics::Many(
                self.statics
                    .into_iter()
                    .map(|(k, s)| (k, s.freeze()))
                    .collect(),
            )
        };
        Dir {
            leaf: self.leaf.into(),
            statics,
            param: self.param.map(|s| Box::new(s.freeze())),
            tail: self.tail.into(),
        }
    }
}

impl SegB {
    fn freeze(self) -> Seg {
        Seg {
            end: self.end.into(),
            dir: self.dir.map(|d| Box::new(d.freeze())),
        }
    }
}
