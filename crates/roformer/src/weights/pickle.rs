//! A pickle reader for `torch.save`'s `data.pkl`: it builds the objects a state dict is made
//! of and never runs anything.
//!
//! # Why our own reader
//! candle's reader (`candle_core::pickle`) builds a recursive `Object` tree: dropping, cloning
//! (every memo put and get clones a whole subtree) and debug-printing it recurse once per
//! nesting level, so a pickle of 200 000 nested lists (`]` * 200000 + `a` * 199999) overflows
//! the stack when the tree is dropped and aborts the process. It also allocates whatever a
//! `BINUNICODE` length claims (up to 4 GiB) before reading, and lets a few bytes of memo gets
//! copy a large subtree again and again.
//!
//! This reader keeps every object in one flat arena ([`Pickle::values`]) and refers to objects
//! by index, so nothing anywhere recurses: the pickle machine's stack is a `Vec`, dropping the
//! arena drops a flat list, and the memo shares an object by index as Python does instead of
//! copying it. Memory is bounded by the pickle's length: every opcode (at least one byte)
//! makes at most one object or one reference, and a length field is checked against the bytes
//! left before anything is allocated.
//!
//! Nesting is still limited to [`MAX_DEPTH`] levels (an object inside a container counts one
//! level more than the container's deepest member had when it went in), far above the 6 to 8
//! levels of a state dict (the dict, a rebuild call, its argument tuple, the storage's
//! persistent id and its tuple, around plain values), so that a hostile pickle gets a clear
//! error and code that walks the objects never meets an unbounded structure.
//!
//! The opcodes understood are those `torch.save` writes with its default protocol 2 (the set
//! candle reads, plus `DICT`); any other opcode is refused by name and offset.

use std::collections::HashMap;
use std::fmt;

/// The deepest container nesting accepted.
pub(crate) const MAX_DEPTH: u32 = 1000;

/// The index of an object in [`Pickle::values`].
pub(crate) type Id = usize;

/// One object built by the pickle.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A reference to a module attribute (`GLOBAL`), never resolved or called.
    Global {
        /// The module, e.g. `torch._utils`.
        module: String,
        /// The attribute, e.g. `_rebuild_tensor_v2`.
        name: String,
    },
    /// A tuple.
    Tuple(Vec<Id>),
    /// A list.
    List(Vec<Id>),
    /// A dict as its key-value pairs in insertion order (later keys win when read).
    Dict(Vec<(Id, Id)>),
    /// A call `callable(*args)` recorded, not made (`REDUCE`, `NEWOBJ`).
    Reduce {
        /// The callable.
        callable: Id,
        /// The argument tuple.
        args: Id,
    },
    /// A persistent id (`BINPERSID`): in `torch.save`'s pickles, a storage reference.
    PersistentId(Id),
}

/// Why a pickle cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PickleError {
    /// The byte offset of the opcode that failed.
    pub offset: usize,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pickle byte {}: {}", self.offset, self.reason)
    }
}

/// A read pickle: every object it built and the one it returned.
#[derive(Debug)]
pub(crate) struct Pickle {
    /// Every object, referred to by index.
    pub values: Vec<Value>,
    /// The object `STOP` returned.
    pub root: Id,
}

impl Pickle {
    /// The object `id` (an index this pickle handed out).
    pub fn get(&self, id: Id) -> Option<&Value> {
        self.values.get(id)
    }
}

/// An item of the pickle machine's stack.
#[derive(Debug, Clone, Copy)]
enum Item {
    Mark,
    Object(Id),
}

/// The pickle machine: its stack, memo and the arena of objects.
struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    /// Where the opcode being run starts (for messages).
    op_start: usize,
    stack: Vec<Item>,
    memo: HashMap<u32, Id>,
    values: Vec<Value>,
    /// Nesting depth of each object, parallel to `values`.
    depth: Vec<u32>,
}

type Step<T> = Result<T, String>;

/// Reads a pickle.
///
/// # Errors
/// Truncated data, an unknown opcode, an opcode that does not fit the stack (e.g. `APPEND` to
/// something not a list), nesting deeper than [`MAX_DEPTH`], or no `STOP`.
pub(crate) fn read(data: &[u8]) -> Result<Pickle, PickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        op_start: 0,
        stack: Vec::new(),
        memo: HashMap::new(),
        values: Vec::new(),
        depth: Vec::new(),
    };
    loop {
        m.op_start = m.pos;
        match m.step() {
            Ok(None) => {}
            Ok(Some(root)) => {
                return Ok(Pickle {
                    values: m.values,
                    root,
                })
            }
            Err(reason) => {
                return Err(PickleError {
                    offset: m.op_start,
                    reason,
                })
            }
        }
    }
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Step<&'a [u8]> {
        let left = self.data.len() - self.pos;
        if n > left {
            return Err(format!(
                "truncated: needs {n} more bytes, {left} left in the pickle"
            ));
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Step<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn byte(&mut self) -> Step<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Step<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// The bytes up to the next newline (which is consumed).
    fn line(&mut self) -> Step<String> {
        let rest = &self.data[self.pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err("truncated: a GLOBAL name has no end of line".into());
        };
        self.pos += end + 1;
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    }

    /// Adds an object nested one level below `children` and pushes it.
    fn push_new(&mut self, value: Value, children: &[Id]) -> Step<()> {
        let depth = within_limit(1 + children.iter().map(|&c| self.depth[c]).max().unwrap_or(0))?;
        self.values.push(value);
        self.depth.push(depth);
        self.stack.push(Item::Object(self.values.len() - 1));
        Ok(())
    }

    fn push_leaf(&mut self, value: Value) -> Step<()> {
        self.push_new(value, &[])
    }

    fn pop(&mut self) -> Step<Id> {
        match self.stack.pop() {
            Some(Item::Object(id)) => Ok(id),
            Some(Item::Mark) => Err("a MARK where an object was expected".into()),
            None => Err("the stack is empty".into()),
        }
    }

    fn top(&self) -> Step<Id> {
        match self.stack.last() {
            Some(Item::Object(id)) => Ok(*id),
            Some(Item::Mark) => Err("a MARK where an object was expected".into()),
            None => Err("the stack is empty".into()),
        }
    }

    /// The objects above the topmost MARK, which is removed with them.
    fn pop_to_mark(&mut self) -> Step<Vec<Id>> {
        let Some(mark) = self.stack.iter().rposition(|i| matches!(i, Item::Mark)) else {
            return Err("no MARK on the stack".into());
        };
        let items = self.stack.split_off(mark + 1);
        self.stack.pop();
        Ok(items
            .into_iter()
            .filter_map(|i| match i {
                Item::Object(id) => Some(id),
                Item::Mark => None,
            })
            .collect())
    }

    /// Records that `container` now holds `members` (its depth grows to fit them).
    fn deepen(&mut self, container: Id, members: &[Id]) -> Step<()> {
        let inner = members.iter().map(|&c| self.depth[c]).max().unwrap_or(0);
        self.depth[container] = within_limit(self.depth[container].max(inner + 1))?;
        Ok(())
    }

    /// Appends `members` to the list on top of the stack.
    fn extend_list(&mut self, members: Vec<Id>) -> Step<()> {
        let list = self.top()?;
        self.deepen(list, &members)?;
        match &mut self.values[list] {
            Value::List(items) => {
                items.extend(members);
                Ok(())
            }
            other => Err(format!("APPEND to a {}, not a list", kind(other))),
        }
    }

    /// Adds key-value pairs (`flat` = key, value, key, value, ...) to the dict on top of the
    /// stack.
    fn extend_dict(&mut self, flat: Vec<Id>) -> Step<()> {
        if !flat.len().is_multiple_of(2) {
            return Err("SETITEMS with an odd number of keys and values".into());
        }
        let dict = self.top()?;
        self.deepen(dict, &flat)?;
        match &mut self.values[dict] {
            Value::Dict(pairs) => {
                pairs.extend(flat.chunks_exact(2).map(|kv| (kv[0], kv[1])));
                Ok(())
            }
            other => Err(format!("SETITEM on a {}, not a dict", kind(other))),
        }
    }

    fn tuple(&mut self, members: Vec<Id>) -> Step<()> {
        let children = members.clone();
        self.push_new(Value::Tuple(members), &children)
    }

    /// `callable(*args)`: a dict for the dict classes a state dict is made of (so that
    /// `SETITEMS` can fill it), a recorded call otherwise.
    fn reduce(&mut self, callable: Id, args: Id) -> Step<()> {
        if let Value::Global { module, name } = &self.values[callable] {
            if module == "collections" && (name == "OrderedDict" || name == "defaultdict") {
                return self.push_leaf(Value::Dict(Vec::new()));
            }
        }
        self.push_new(Value::Reduce { callable, args }, &[callable, args])
    }

    fn memo_get(&mut self, key: u32) -> Step<()> {
        let id = *self
            .memo
            .get(&key)
            .ok_or_else(|| format!("memo key {key} was never stored"))?;
        self.stack.push(Item::Object(id));
        Ok(())
    }

    fn memo_put(&mut self, key: u32) -> Step<()> {
        let id = self.top()?;
        self.memo.insert(key, id);
        Ok(())
    }

    /// Runs one opcode; the returned object when it is `STOP`. The opcodes come in four
    /// groups, each its own step: constants ([`Machine::constant`]), containers
    /// ([`Machine::container`]), objects ([`Machine::object`]) and the memo
    /// ([`Machine::memo`]).
    fn step(&mut self) -> Step<Option<Id>> {
        if self.pos == self.data.len() {
            return Err("the pickle ends without STOP".into());
        }
        let op = self.byte()?;
        match op {
            0x80 => {
                let proto = self.byte()?;
                if proto > 5 {
                    return Err(format!("unknown pickle protocol {proto}"));
                }
            }
            b'.' => return self.pop().map(Some),
            b'(' => self.stack.push(Item::Mark),
            _ => {
                if let Some(value) = self.constant(op)? {
                    self.push_leaf(value)?;
                } else if !(self.container(op)? || self.object(op)? || self.memo(op)?) {
                    return Err(format!(
                        "unsupported opcode {op:#04x} ({:?}); torch.save's pickles do not use it",
                        char::from(op)
                    ));
                }
            }
        }
        Ok(None)
    }

    /// The value of a constant opcode (`None`, booleans, integers, floats, strings, globals),
    /// its operand read; `None` when `op` is not one.
    fn constant(&mut self, op: u8) -> Step<Option<Value>> {
        Ok(Some(match op {
            b'N' => Value::None,
            0x88 => Value::Bool(true),
            0x89 => Value::Bool(false),
            b'K' => Value::Int(self.byte()?.into()),
            b'M' => Value::Int(u16::from_le_bytes(self.array()?).into()),
            b'J' => Value::Int(i32::from_le_bytes(self.array()?).into()),
            0x8a => {
                let n = usize::from(self.byte()?);
                Value::Int(long1(self.take(n)?)?)
            }
            b'G' => Value::Float(f64::from_be_bytes(self.array()?)),
            b'X' => {
                let n = usize::try_from(self.u32()?).map_err(|e| e.to_string())?;
                let bytes = self.take(n)?;
                let s = std::str::from_utf8(bytes)
                    .map_err(|e| format!("BINUNICODE is not UTF-8: {e}"))?;
                Value::Str(s.to_owned())
            }
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                Value::Global { module, name }
            }
            _ => return Ok(None),
        }))
    }

    /// Runs a container opcode (tuples, lists, dicts and their appends); false when `op` is
    /// not one.
    fn container(&mut self, op: u8) -> Step<bool> {
        match op {
            b')' => self.tuple(Vec::new())?,
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if self.stack.len() < n {
                    return Err(format!("TUPLE{n} on a stack of {}", self.stack.len()));
                }
                let mut members = Vec::with_capacity(n);
                for _ in 0..n {
                    members.push(self.pop()?);
                }
                members.reverse();
                self.tuple(members)?
            }
            b't' => {
                let members = self.pop_to_mark()?;
                self.tuple(members)?
            }
            b']' => self.push_leaf(Value::List(Vec::new()))?,
            b'}' => self.push_leaf(Value::Dict(Vec::new()))?,
            b'd' => {
                let flat = self.pop_to_mark()?;
                self.push_leaf(Value::Dict(Vec::new()))?;
                self.extend_dict(flat)?
            }
            b'a' => {
                let member = self.pop()?;
                self.extend_list(vec![member])?
            }
            b'e' => {
                let members = self.pop_to_mark()?;
                self.extend_list(members)?
            }
            b's' => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.extend_dict(vec![key, value])?
            }
            b'u' => {
                let flat = self.pop_to_mark()?;
                self.extend_dict(flat)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Runs an object opcode (`REDUCE`, `NEWOBJ`, `BUILD`, `BINPERSID`); false when `op` is
    /// not one.
    fn object(&mut self, op: u8) -> Step<bool> {
        match op {
            b'R' | 0x81 => {
                let args = self.pop()?;
                let callable = self.pop()?;
                self.reduce(callable, args)?
            }
            b'b' => {
                // BUILD sets attributes (an OrderedDict's `_metadata`): a state dict's items do
                // not depend on them, so the state is dropped and the object kept.
                self.pop()?;
                self.top()?;
            }
            b'Q' => {
                let pid = self.pop()?;
                self.push_new(Value::PersistentId(pid), &[pid])?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Runs a memo opcode (`BINGET`, `LONG_BINGET`, `BINPUT`, `LONG_BINPUT`); false when `op`
    /// is not one.
    fn memo(&mut self, op: u8) -> Step<bool> {
        match op {
            b'h' => {
                let key = self.byte()?;
                self.memo_get(key.into())?
            }
            b'j' => {
                let key = self.u32()?;
                self.memo_get(key)?
            }
            b'q' => {
                let key = self.byte()?;
                self.memo_put(key.into())?
            }
            b'r' => {
                let key = self.u32()?;
                self.memo_put(key)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// `depth`, or an error past [`MAX_DEPTH`].
fn within_limit(depth: u32) -> Step<u32> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "objects nested deeper than {MAX_DEPTH} levels (state dicts need fewer than 10)"
        ));
    }
    Ok(depth)
}

/// A `LONG1` integer: little-endian two's complement in `bytes` (at most 8 of them).
fn long1(bytes: &[u8]) -> Step<i64> {
    if bytes.len() > 8 {
        return Err(format!(
            "a {}-byte LONG1 does not fit in 64 bits",
            bytes.len()
        ));
    }
    let negative = bytes.last().is_some_and(|&b| b & 0x80 != 0);
    let mut le = [if negative { 0xff } else { 0 }; 8];
    le[..bytes.len()].copy_from_slice(bytes);
    Ok(i64::from_le_bytes(le))
}

/// The Python type name of `v`, for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::None => "None",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Float(_) => "float",
        Value::Str(_) => "str",
        Value::Global { .. } => "global",
        Value::Tuple(_) => "tuple",
        Value::List(_) => "list",
        Value::Dict(_) => "dict",
        Value::Reduce { .. } => "call",
        Value::PersistentId(_) => "persistent id",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested_lists(n: usize) -> Vec<u8> {
        let mut p = b"\x80\x02".to_vec();
        p.extend(std::iter::repeat_n(b']', n));
        p.extend(std::iter::repeat_n(b'a', n - 1));
        p.push(b'.');
        p
    }

    #[test]
    fn nesting_up_to_the_limit_reads_and_past_it_is_refused() {
        let ok = read(&nested_lists(MAX_DEPTH as usize)).unwrap();
        assert!(matches!(ok.get(ok.root), Some(Value::List(l)) if l.len() == 1));
        let err = read(&nested_lists(MAX_DEPTH as usize + 1)).unwrap_err();
        assert!(err.reason.contains("deeper than 1000"), "{err}");
    }

    #[test]
    fn memo_shares_objects_and_dict_keeps_pairs() {
        // {"a": 1, "b": <same list>} with the list stored once and fetched from the memo.
        let p = b"\x80\x02(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00b]q\x00d.";
        let pk = read(p).unwrap();
        let Some(Value::Dict(pairs)) = pk.get(pk.root) else {
            panic!("{:?}", pk.values)
        };
        assert_eq!(pairs.len(), 2);
        assert_eq!(pk.get(pairs[0].1), Some(&Value::Int(1)));
    }

    #[test]
    fn long1_is_twos_complement() {
        assert_eq!(long1(&[]).unwrap(), 0);
        assert_eq!(long1(&[0xff]).unwrap(), -1);
        assert_eq!(long1(&[0x00, 0x01]).unwrap(), 256);
        assert!(long1(&[0; 9]).is_err());
    }

    #[test]
    fn bad_pickles_are_errors_with_offsets() {
        for (bytes, says) in [
            (&b"\x80\x02X\xff\xff\xff\xffab"[..], "truncated"),
            (b"\x80\x02K\x01", "without STOP"),
            (b"\x80\x02K\x01a.", "the stack is empty"),
            (b"\x80\x02}K\x01a.", "not a list"),
            (b"\x80\x02cos\nsystem\n\x93.", "unsupported opcode"),
            (b"\x80\x02h\x05.", "memo key 5"),
            (b"\x80\x02(K\x01K\x02K\x03d.", "odd number"),
            (b"", "without STOP"),
        ] {
            let err = read(bytes).unwrap_err();
            assert!(err.reason.contains(says), "{bytes:?}: {err}");
        }
    }
}
