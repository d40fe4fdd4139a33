//! YAML through serde-saphyr, which deserializes straight from the parser's events into
//! our types: fields we skip are never built, plain scalars we keep are copied once.
//!
//! Two readings of a stream:
//! - [`typed`]: every document at once as a [`RawDoc`], the path every well-formed file
//!   takes;
//! - [`documents`], [`header`] and [`strict`]: one document at a time, for a file with
//!   a document that does not fit. A document's type fields are read first without
//!   judging anything else, then only the parts that are `discovery.k8s.io/v1`
//!   EndpointSlices are read strictly, with the failing field's path and line.
//!
//! serde-saphyr reads a multi-document stream only as a whole, so the per-document
//! reading finds each document's root node in the parser's event stream and reads
//! that text on its own (anchors are per document in YAML, so nothing is lost).

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_saphyr::granit_parser::{Event, Marker, Parser};

mod header;
pub(super) use header::Header;
use header::Text;

use super::{
    SliceError,
    raw::{RawDoc, RawSlice},
};

/// How we read YAML. The default budget (1 M events, 250 k nodes, 1024 documents)
/// would refuse a `kubectl get endpointslices -A -o yaml` of a large cluster, so those
/// limits grow with the text: without aliases a node or event takes at least a byte or
/// so of input. What stays bounded is what does not grow with the text: depth and
/// alias expansion (billion laughs). Duplicate keys pass to serde as they come, so a
/// derived struct refuses a repeated field and a label map keeps the last value.
fn options(text: &str) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    let events = text.len().saturating_mul(2);
    budget.max_events = budget.max_events.max(events);
    budget.max_nodes = budget.max_nodes.max(events);
    budget.max_documents = budget.max_documents.max(text.len() / 4);
    serde_saphyr::options! {
        budget: Some(budget),
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        with_snippet: false,
    }
}

/// Every document of `text` as a [`RawDoc`] (null and empty documents left out), or
/// `None` if any does not fit.
pub(super) fn typed(text: &str) -> Option<Vec<RawDoc>> {
    serde_saphyr::from_multiple_with_options(text, options(text)).ok()
}

/// One document of a stream: its root node's text and where that starts.
pub(super) struct Document<'a> {
    text: &'a str,
    /// 1-based line of the root node.
    line: usize,
    /// 0-based column of the root node.
    column: usize,
}

impl Document<'_> {
    /// The document read on its own, with columns as in the stream: the root is
    /// indented as it was there (a list item's mapping starts at its column).
    fn read<T>(
        &self,
        f: impl for<'e> FnOnce(serde_saphyr::Deserializer<'_, 'e>) -> Result<T, serde_saphyr::Error>,
    ) -> Result<T, serde_saphyr::Error> {
        let text = format!("{:1$}{2}", "", self.column, self.text);
        serde_saphyr::with_deserializer_from_str_with_options(&text, options(&text), f)
    }

    /// `error`'s message with its line and column in the stream.
    fn locate(&self, error: &serde_saphyr::Error) -> String {
        use serde_saphyr::MessageFormatter as _;
        let error = error.without_snippet();
        let message = serde_saphyr::UserMessageFormatter.format_message(error);
        match error.location() {
            Some(at) => format!(
                "{message} at line {} column {}",
                (at.line() as usize + self.line).saturating_sub(1),
                at.column()
            ),
            None => message.into_owned(),
        }
    }
}

/// Every document of `text`, empty ones included (they count in
/// [`SliceError::Malformed::document`]).
///
/// # Errors
/// [`SliceError::Syntax`]: `text` is not YAML.
pub(super) fn documents(text: &str) -> Result<Vec<Document<'_>>, SliceError> {
    let syntax = |message: String| SliceError::Syntax { message };
    let offset = |m: &Marker| {
        m.byte_offset()
            .ok_or_else(|| syntax("the YAML reader gave no position".to_owned()))
    };
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = Marker::default();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| {
            syntax(format!(
                "{} at line {} column {}",
                e.info(),
                e.marker().line(),
                e.marker().col() + 1
            ))
        })?;
        let end = match event {
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                if depth == 0 {
                    start = span.start;
                }
                depth += 1;
                continue;
            }
            Event::MappingEnd | Event::SequenceEnd => {
                depth = depth.saturating_sub(1);
                if depth > 0 {
                    continue;
                }
                span.end
            }
            Event::Scalar(..) | Event::Alias(..) if depth == 0 => {
                start = span.start;
                span.end
            }
            _ => continue,
        };
        let range = offset(&start)?..offset(&end)?;
        out.push(Document {
            text: text
                .get(range)
                .ok_or_else(|| syntax("a position outside the text".into()))?,
            line: start.line(),
            column: start.col(),
        });
    }
    Ok(out)
}

/// Reads `doc`'s [`Header`].
///
/// # Errors
/// [`SliceError::Syntax`]: the document is not YAML after all (the reader of a single
/// document checks more than the event stream does, e.g. its budget).
pub(super) fn header(doc: &Document<'_>) -> Result<Header, SliceError> {
    doc.read(|de| de.deserialize_any(header::HeaderVisitor))
        .map_err(|e| SliceError::Syntax {
            message: doc.locate(&e),
        })
}

/// What [`strict`] reads of a document.
pub(super) enum Parts<'a> {
    /// The document is one slice.
    Whole,
    /// The document is a list: the items marked `true` are slices, the rest are
    /// skipped unread.
    Items(&'a [bool]),
}

/// The slices `parts` names in `doc`, in order.
///
/// # Errors
/// The first that does not fit: the field's path, what is wrong, line and column.
pub(super) fn strict(doc: &Document<'_>, parts: Parts<'_>) -> Result<Vec<RawSlice>, String> {
    let mut track = serde_path_to_error::Track::new();
    let read = doc.read(|de| {
        let de = serde_path_to_error::Deserializer::new(de, &mut track);
        match parts {
            Parts::Whole => serde::Deserialize::deserialize(de).map(|s| vec![s]),
            Parts::Items(strict) => de.deserialize_map(ListVisitor { strict }),
        }
    });
    read.map_err(|e| {
        let path = track.path().to_string();
        match path.as_str() {
            "." | "" => doc.locate(&e),
            _ => format!("{path}: {}", doc.locate(&e)),
        }
    })
}

/// A list document's slices: `items`, the entries marked in `strict` read as
/// [`RawSlice`], the others skipped; other keys skipped.
struct ListVisitor<'a> {
    strict: &'a [bool],
}

impl<'de> Visitor<'de> for ListVisitor<'_> {
    type Value = Vec<RawSlice>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut slices = Vec::new();
        while let Some(key) = m.next_key_seed(Text)? {
            if key.as_deref() == Some("items") {
                slices = m.next_value_seed(ItemsSeed {
                    strict: self.strict,
                })?;
            } else {
                m.next_value::<IgnoredAny>()?;
            }
        }
        Ok(slices)
    }
}

struct ItemsSeed<'a> {
    strict: &'a [bool],
}

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Vec<RawSlice>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Vec<RawSlice>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of items")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        let mut slices = Vec::new();
        for &strict in self.strict {
            if strict {
                match s.next_element::<RawSlice>()? {
                    Some(slice) => slices.push(slice),
                    None => break,
                }
            } else if s.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
        }
        while s.next_element::<IgnoredAny>()?.is_some() {}
        Ok(slices)
    }
}
