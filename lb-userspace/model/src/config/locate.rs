//! Which field of a TOML file a byte offset lies in: the parser's schema errors come
//! with a position but not always with the field, and a user-facing error names both.

use toml_edit::{ImDocument, Item, Table, Value};

/// The dotted path (`service[0].fade_in.window`, `node.l7.header_timeout`) of the
/// value whose text contains byte `offset` of `text`, if the text parses as TOML and
/// the offset lies in a value.
pub fn field_at(text: &str, offset: usize) -> Option<String> {
    let doc = ImDocument::parse(text).ok()?;
    in_table(doc.as_table(), offset, "")
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn in_table(table: &Table, offset: usize, prefix: &str) -> Option<String> {
    table
        .iter()
        .find_map(|(key, item)| in_item(item, offset, &join(prefix, key)))
}

fn in_item(item: &Item, offset: usize, path: &str) -> Option<String> {
    match item {
        Item::None => None,
        Item::Value(v) => in_value(v, offset, path),
        Item::Table(t) => in_table(t, offset, path),
        Item::ArrayOfTables(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, t)| in_table(t, offset, &format!("{path}[{i}]"))),
    }
}

fn in_value(value: &Value, offset: usize, path: &str) -> Option<String> {
    if !value.span().is_some_and(|s| s.contains(&offset)) {
        return None;
    }
    let inner = match value {
        Value::InlineTable(t) => t
            .iter()
            .find_map(|(key, v)| in_value(v, offset, &join(path, key))),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| in_value(v, offset, &format!("{path}[{i}]"))),
        _ => None,
    };
    Some(inner.unwrap_or_else(|| path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_fields_in_tables_arrays_and_inline_tables() {
        let text = "[node]\ninterface = \"eth0\"\n[node.l7]\nidle_timeout = \"5s\"\n\n[[service]]\nname = \"a\"\n[[service]]\nname = \"b\"\nfade_in = { window = \"20s\" }\nbackends = [{ address = \"198.18.0.1\" }, { address = \"198.18.0.2\" }]\n";
        let at = |needle: &str| field_at(text, text.find(needle).expect(needle));
        assert_eq!(at("\"5s\"").as_deref(), Some("node.l7.idle_timeout"));
        assert_eq!(at("\"eth0\"").as_deref(), Some("node.interface"));
        assert_eq!(at("\"20s\"").as_deref(), Some("service[1].fade_in.window"));
        assert_eq!(
            at("\"198.18.0.2\"").as_deref(),
            Some("service[1].backends[1].address")
        );
        assert_eq!(at("[node.l7]"), None, "a header is not a value");
        assert_eq!(field_at("not = [toml", 3), None);
    }
}
