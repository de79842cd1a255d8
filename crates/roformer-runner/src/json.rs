//! JSON output that never writes `null` for a number.
//!
//! serde_json writes a NaN or an infinite f32/f64 as `null`, which a reader takes for a
//! missing value. Every JSON the CLI prints or writes goes through [`to_string`],
//! [`to_string_pretty`] or [`to_value`], which first walk the value and refuse a non-finite
//! float, naming its field (`masks[0].predictions[1].probability`). A float put into a `json!`
//! literal is checked on its own with [`finite`]: the macro turns a NaN into `null` before any
//! check could see it.

use std::fmt;

use serde::ser::{self, Serialize};

/// `value` as one line of JSON.
///
/// # Errors
/// A NaN or infinite float anywhere in `value` (named by its path), or a serde error.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    check(value)?;
    Ok(serde_json::to_string(value)?)
}

/// `value` as indented JSON.
///
/// # Errors
/// As [`to_string`].
pub fn to_string_pretty<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    check(value)?;
    Ok(serde_json::to_string_pretty(value)?)
}

/// `value` as a JSON value (to add fields to).
///
/// # Errors
/// As [`to_string`].
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<serde_json::Value> {
    check(value)?;
    Ok(serde_json::to_value(value)?)
}

/// `x` itself when it is finite, for a `json!` field named `field`.
///
/// # Errors
/// A NaN or an infinity, named.
pub fn finite(field: &str, x: f64) -> anyhow::Result<f64> {
    if !x.is_finite() {
        return Err(not_writable(field, x));
    }
    Ok(x)
}

/// The error for the non-finite `value` at `field`.
fn not_writable(field: &str, value: f64) -> anyhow::Error {
    anyhow::anyhow!("cannot write {field} = {value} as JSON (JSON has no NaN or infinity)")
}

/// Fails at the first non-finite float of `value`, naming its path.
fn check<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let mut walker = Walker::default();
    match value.serialize(&mut walker) {
        Err(Stop::NonFinite { path, value }) => Err(not_writable(&path, value)),
        // Other errors are serde_json's to report when it serialises.
        Ok(()) | Err(Stop::Other(_)) => Ok(()),
    }
}

/// Why the walk stopped.
#[derive(Debug)]
enum Stop {
    /// A NaN or infinite float at `path`.
    NonFinite { path: String, value: f64 },
    /// An error of the value's own `Serialize`.
    Other(String),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::NonFinite { path, value } => write!(f, "{path} = {value}"),
            Stop::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Stop {}

impl ser::Error for Stop {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Stop::Other(msg.to_string())
    }
}

/// One step into a value: a field (or enum variant), an array index or a map key.
#[derive(Debug)]
enum Step {
    Field(&'static str),
    Index(usize),
    Key(String),
}

/// A serializer that writes nothing: it walks a value and stops at the first non-finite
/// float, remembering the path to it.
#[derive(Debug, Default)]
struct Walker {
    path: Vec<Step>,
}

impl Walker {
    fn float(&self, value: f64) -> Result<(), Stop> {
        if value.is_finite() {
            return Ok(());
        }
        let mut path = String::new();
        for step in &self.path {
            match step {
                Step::Field(name) => push_name(&mut path, name),
                Step::Key(name) => push_name(&mut path, name),
                Step::Index(i) => path.push_str(&format!("[{i}]")),
            }
        }
        if path.is_empty() {
            path.push_str("the value");
        }
        Err(Stop::NonFinite { path, value })
    }

    fn nested<T: Serialize + ?Sized>(&mut self, step: Step, value: &T) -> Result<(), Stop> {
        self.path.push(step);
        let result = value.serialize(&mut *self);
        self.path.pop();
        result
    }
}

fn push_name(path: &mut String, name: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
}

/// A compound value being walked; `variant` says whether an enum variant's name was pushed.
struct Compound<'a> {
    walker: &'a mut Walker,
    index: usize,
    key: String,
    variant: bool,
}

impl<'a> Compound<'a> {
    fn new(walker: &'a mut Walker, variant: Option<&'static str>) -> Self {
        if let Some(name) = variant {
            walker.path.push(Step::Field(name));
        }
        Compound {
            walker,
            index: 0,
            key: String::new(),
            variant: variant.is_some(),
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        let step = Step::Index(self.index);
        self.index += 1;
        self.walker.nested(step, value)
    }

    fn end(self) -> Result<(), Stop> {
        if self.variant {
            self.walker.path.pop();
        }
        Ok(())
    }
}

impl<'a> ser::Serializer for &'a mut Walker {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, _: bool) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Stop> {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Stop> {
        self.float(v)
    }
    fn serialize_char(self, _: char) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.nested(Step::Field(variant), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, Some(variant)))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, Some(variant)))
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.element(value)
    }
    fn end(self) -> Result<(), Stop> {
        Compound::end(self)
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.element(value)
    }
    fn end(self) -> Result<(), Stop> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.element(value)
    }
    fn end(self) -> Result<(), Stop> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        self.element(value)
    }
    fn end(self) -> Result<(), Stop> {
        Compound::end(self)
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Stop> {
        // Keys are named as JSON writes them (a string key without its quotes).
        self.key = match serde_json::to_value(key) {
            Ok(serde_json::Value::String(s)) => s,
            Ok(other) => other.to_string(),
            Err(e) => return Err(Stop::Other(e.to_string())),
        };
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        let step = Step::Key(std::mem::take(&mut self.key));
        self.walker.nested(step, value)
    }
    fn end(self) -> Result<(), Stop> {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.walker.nested(Step::Field(key), value)
    }
    fn end(self) -> Result<(), Stop> {
        Compound::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.walker.nested(Step::Field(key), value)
    }
    fn end(self) -> Result<(), Stop> {
        Compound::end(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeMap;

    #[derive(Serialize)]
    struct Prediction {
        id: u32,
        probability: f64,
        note: Option<f32>,
    }

    #[derive(Serialize)]
    struct Report {
        masks: Vec<Vec<Prediction>>,
        by_label: BTreeMap<String, f32>,
    }

    fn report(probability: f64, label_p: f32) -> Report {
        Report {
            masks: vec![vec![
                Prediction {
                    id: 1,
                    probability: 0.5,
                    note: None,
                },
                Prediction {
                    id: 2,
                    probability,
                    note: Some(1.0),
                },
            ]],
            by_label: BTreeMap::from([("pos".to_owned(), label_p)]),
        }
    }

    #[test]
    fn finite_values_are_written_as_serde_json_writes_them() {
        let r = report(0.25, 0.75);
        assert_eq!(to_string(&r).unwrap(), serde_json::to_string(&r).unwrap());
        assert_eq!(
            to_string_pretty(&r).unwrap(),
            serde_json::to_string_pretty(&r).unwrap()
        );
        assert_eq!(to_value(&r).unwrap(), serde_json::to_value(&r).unwrap());
        // A None is still `null`: only numbers are checked.
        assert!(to_string(&r).unwrap().contains("\"note\":null"));
    }

    #[test]
    fn non_finite_floats_are_errors_naming_their_path() {
        let err = to_string(&report(f64::NAN, 0.5)).unwrap_err().to_string();
        assert!(err.contains("masks[0][1].probability = NaN"), "{err}");
        let err = to_value(&report(0.5, f32::INFINITY))
            .unwrap_err()
            .to_string();
        assert!(err.contains("by_label.pos = inf"), "{err}");
        let err = to_string(&[1.0, f64::NEG_INFINITY])
            .unwrap_err()
            .to_string();
        assert!(err.contains("[1] = -inf"), "{err}");
        let err = to_string(&f32::NAN).unwrap_err().to_string();
        assert!(err.contains("the value = NaN"), "{err}");
        assert!(finite("seconds", f64::NAN).is_err());
        assert_eq!(finite("seconds", 2.0).unwrap(), 2.0);
    }
}
