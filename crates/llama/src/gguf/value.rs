//! GGUF metadata values.

use super::cursor::Cursor;
use crate::error::Result;

/// Arrays nested deeper than this are refused (the format allows nesting; files use depth 1).
const MAX_ARRAY_DEPTH: usize = 8;

/// One metadata value. Array elements are widened to 64 bits, so an array holds at most 8 times
/// the bytes it takes in the file: memory stays bounded by the file, whatever a count claims.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// GGUF type 0.
    U8(u8),
    /// GGUF type 1.
    I8(i8),
    /// GGUF type 2.
    U16(u16),
    /// GGUF type 3.
    I16(i16),
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 5.
    I32(i32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 7.
    Bool(bool),
    /// GGUF type 8.
    String(String),
    /// GGUF type 9.
    Array(Array),
    /// GGUF type 10.
    U64(u64),
    /// GGUF type 11.
    I64(i64),
    /// GGUF type 12.
    F64(f64),
}

/// A GGUF array: elements of one type.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    /// Unsigned integers of 8, 16, 32 or 64 bits, widened.
    Unsigned(Vec<u64>),
    /// Signed integers of 8, 16, 32 or 64 bits, widened.
    Signed(Vec<i64>),
    /// f32 or f64 values, widened.
    Float(Vec<f64>),
    /// Booleans.
    Bool(Vec<bool>),
    /// Strings.
    String(Vec<String>),
    /// Arrays.
    Array(Vec<Array>),
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::Unsigned(v) => v.len(),
            Array::Signed(v) => v.len(),
            Array::Float(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a float of either width.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The GGUF name of the value's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }

    /// Reads a value of GGUF type `kind`.
    pub(super) fn read(cur: &mut Cursor<'_>, kind: u32) -> Result<Value> {
        Ok(match kind {
            0 => Value::U8(cur.u8("u8 value")?),
            1 => Value::I8(cur.u8("i8 value")? as i8),
            2 => Value::U16(cur.u16("u16 value")?),
            3 => Value::I16(cur.u16("i16 value")? as i16),
            4 => Value::U32(cur.u32("u32 value")?),
            5 => Value::I32(cur.u32("i32 value")? as i32),
            6 => Value::F32(cur.f32("f32 value")?),
            7 => Value::Bool(read_bool(cur)?),
            8 => Value::String(cur.string("string value")?),
            9 => Value::Array(read_array(cur, 1)?),
            10 => Value::U64(cur.u64("u64 value")?),
            11 => Value::I64(cur.u64("i64 value")? as i64),
            12 => Value::F64(cur.f64("f64 value")?),
            other => return Err(cur.error(format!("unknown value type {other}"))),
        })
    }
}

/// A GGUF bool: one byte, 0 or 1.
fn read_bool(cur: &mut Cursor<'_>) -> Result<bool> {
    match cur.u8("bool value")? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(cur.error(format!("bool value {other} is neither 0 nor 1"))),
    }
}

/// Reads an array (element type u32, count u64, elements) nested `depth` deep.
fn read_array(cur: &mut Cursor<'_>, depth: usize) -> Result<Array> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(cur.error(format!("arrays nested deeper than {MAX_ARRAY_DEPTH}")));
    }
    let kind = cur.u32("array element type")?;
    let width = match kind {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        8 => 8,  // a string is at least its length
        9 => 12, // an array is at least its element type and count
        other => return Err(cur.error(format!("unknown array element type {other}"))),
    };
    let n = cur.count("array length", width)?;
    Ok(match kind {
        0 => Array::Unsigned(collect(n, || cur.u8("u8 element").map(u64::from))?),
        2 => Array::Unsigned(collect(n, || cur.u16("u16 element").map(u64::from))?),
        4 => Array::Unsigned(collect(n, || cur.u32("u32 element").map(u64::from))?),
        10 => Array::Unsigned(collect(n, || cur.u64("u64 element"))?),
        1 => Array::Signed(collect(n, || {
            cur.u8("i8 element").map(|v| i64::from(v as i8))
        })?),
        3 => Array::Signed(collect(n, || {
            cur.u16("i16 element").map(|v| i64::from(v as i16))
        })?),
        5 => Array::Signed(collect(n, || {
            cur.u32("i32 element").map(|v| i64::from(v as i32))
        })?),
        11 => Array::Signed(collect(n, || cur.u64("i64 element").map(|v| v as i64))?),
        6 => Array::Float(collect(n, || cur.f32("f32 element").map(f64::from))?),
        12 => Array::Float(collect(n, || cur.f64("f64 element"))?),
        7 => Array::Bool(collect(n, || read_bool(cur))?),
        8 => Array::String(collect(n, || cur.string("string element"))?),
        _ => Array::Array(collect(n, || read_array(cur, depth + 1))?),
    })
}

/// `n` elements from `next` (`n` was checked against the bytes left, so reserving is safe).
fn collect<T>(n: usize, mut next: impl FnMut() -> Result<T>) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(next()?);
    }
    Ok(out)
}
