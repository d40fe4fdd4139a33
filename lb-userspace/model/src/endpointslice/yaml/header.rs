//! The lenient reading of a document's type fields: anything that is not of the
//! shape we look for is skipped and read as nothing, never an error, because a
//! document that is not an EndpointSlice is ignored whatever it holds.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A document's type fields, read without judging anything else: `kind: 1` or a
/// mapping under `kind` names no kind, an `items` that is not a list holds no items.
#[derive(Default)]
pub(in crate::endpointslice) struct Header {
    /// The document is null or empty.
    pub(in crate::endpointslice) null: bool,
    pub(in crate::endpointslice) kind: Option<String>,
    pub(in crate::endpointslice) api_version: Option<String>,
    /// The type fields of each of `items`, when it is a list.
    pub(in crate::endpointslice) items: Vec<TypeFields>,
}

/// `kind` and `apiVersion` when they are strings.
#[derive(Default)]
pub(in crate::endpointslice) struct TypeFields {
    pub(in crate::endpointslice) kind: Option<String>,
    pub(in crate::endpointslice) api_version: Option<String>,
}

/// The visitor methods of a lenient reader for values that are not of the shape it
/// takes: they are skipped and read as the default.
macro_rules! anything_else_is_default {
    () => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_i128<E>(self, _: i128) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_u128<E>(self, _: u128) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_bytes<E>(self, _: &[u8]) -> Result<Self::Value, E> {
            Ok(Self::Value::default())
        }
        fn visit_enum<A: serde::de::EnumAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
            Visitor::visit_enum(IgnoredAny, a).map(|_| Self::Value::default())
        }
        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    };
}

/// A string, or `None` for anything else.
pub(super) struct Text;

impl<'de> Visitor<'de> for Text {
    type Value = Option<String>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("anything")
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_owned()))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Self::Value, A::Error> {
        Visitor::visit_seq(IgnoredAny, s).map(|_| None)
    }
    fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
        Visitor::visit_map(IgnoredAny, m).map(|_| None)
    }
    anything_else_is_default!();
}

impl<'de> DeserializeSeed<'de> for Text {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

pub(super) struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Header;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a document")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Header, A::Error> {
        let mut header = Header::default();
        while let Some(key) = m.next_key_seed(Text)? {
            match key.as_deref() {
                Some("kind") => header.kind = m.next_value_seed(Text)?,
                Some("apiVersion") => header.api_version = m.next_value_seed(Text)?,
                Some("items") => header.items = m.next_value_seed(ItemsVisitor)?,
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(header)
    }
    fn visit_unit<E>(self) -> Result<Header, E> {
        Ok(Header {
            null: true,
            ..Header::default()
        })
    }
    fn visit_none<E>(self) -> Result<Header, E> {
        Ok(Header {
            null: true,
            ..Header::default()
        })
    }
    fn visit_str<E>(self, _: &str) -> Result<Header, E> {
        Ok(Header::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Header, A::Error> {
        Visitor::visit_seq(IgnoredAny, s).map(|_| Header::default())
    }
    anything_else_is_default!();
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Vec<TypeFields>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of items")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = s.next_element_seed(TypeFieldsVisitor)? {
            items.push(item);
        }
        Ok(items)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Self::Value, A::Error> {
        Visitor::visit_map(IgnoredAny, m).map(|_| Vec::new())
    }
    anything_else_is_default!();
}

impl<'de> DeserializeSeed<'de> for ItemsVisitor {
    type Value = Vec<TypeFields>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

struct TypeFieldsVisitor;

impl<'de> Visitor<'de> for TypeFieldsVisitor {
    type Value = TypeFields;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an item")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<TypeFields, A::Error> {
        let mut fields = TypeFields::default();
        while let Some(key) = m.next_key_seed(Text)? {
            match key.as_deref() {
                Some("kind") => fields.kind = m.next_value_seed(Text)?,
                Some("apiVersion") => fields.api_version = m.next_value_seed(Text)?,
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
    fn visit_str<E>(self, _: &str) -> Result<TypeFields, E> {
        Ok(TypeFields::default())
    }
    fn visit_unit<E>(self) -> Result<TypeFields, E> {
        Ok(TypeFields::default())
    }
    fn visit_none<E>(self) -> Result<TypeFields, E> {
        Ok(TypeFields::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<TypeFields, A::Error> {
        Visitor::visit_seq(IgnoredAny, s).map(|_| TypeFields::default())
    }
    anything_else_is_default!();
}

impl<'de> DeserializeSeed<'de> for TypeFieldsVisitor {
    type Value = TypeFields;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}
