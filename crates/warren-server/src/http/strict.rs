//! A JSON value read as the API's request types describe it, and nothing looser: serde's
//! derived structs also accept a sequence of their fields (`[null, null]` as a
//! `CreateWorkspaceRequest`), which the OpenAPI document does not allow. Here a struct is
//! read only from an object; everything else is read as `serde_json::Value` reads it.

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, Deserializer, IntoDeserializer, Visitor};
use serde_json::Value;

/// A `serde_json::Value` whose structs must be objects.
pub struct Strict(pub Value);

impl<'de> IntoDeserializer<'de, serde_json::Error> for Strict {
    type Deserializer = Strict;
    fn into_deserializer(self) -> Strict {
        self
    }
}

impl<'de> Deserializer<'de> for Strict {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter().map(Strict));
                let v = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(v)
            }
            Value::Object(map) => {
                let mut map = MapDeserializer::new(map.into_iter().map(|(k, v)| (k, Strict(v))));
                let v = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(v)
            }
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            other => {
                let _ = (name, fields);
                Err(de::Error::invalid_type(unexpected(&other), &"an object"))
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        // Enums of the API are strings (or externally tagged objects): as serde_json reads them.
        self.0.deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("a number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

/// Reads `T` from `value`, naming the path of the first problem (`resources.cpu: …`).
pub fn from_value<T: de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(Strict(value)).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: Option<u16>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[serde(default)]
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        kind: Option<Kind>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Env,
        File,
    }

    #[test]
    fn structs_only_from_objects() {
        let ok: Outer =
            from_value(serde_json::json!({"inner": {"a": 1}, "list": [{}], "kind": "file"}))
                .unwrap();
        assert_eq!(ok.inner, Some(Inner { a: Some(1) }));
        assert_eq!(ok.kind, Some(Kind::File));
        assert!(from_value::<Outer>(serde_json::json!([null, null]))
            .unwrap_err()
            .contains("expected an object"));
        let e = from_value::<Outer>(serde_json::json!({"inner": [null]})).unwrap_err();
        assert!(e.starts_with("inner: invalid type: sequence"), "{e}");
        let e = from_value::<Outer>(serde_json::json!({"list": [[1]]})).unwrap_err();
        assert!(e.starts_with("list[0]: invalid type"), "{e}");
        let e = from_value::<Outer>(serde_json::json!({"inner": {"a": 70000}})).unwrap_err();
        assert!(e.starts_with("inner.a: invalid value"), "{e}");
        let e = from_value::<Outer>(serde_json::json!({"colour": 1})).unwrap_err();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let _ = Kind::Env;
    }
}
