//! A pickle machine for what `torch.save` and `torch.distributed.checkpoint` write
//! (protocols 2–5). It never imports or calls anything: globals become inert
//! [`Obj::Global`] values, `REDUCE`/`NEWOBJ`/`BUILD` record the call instead of making it,
//! and only a handful of well-known constructors (`OrderedDict`, `torch.Size`,
//! `_rebuild_tensor_v2`, `_rebuild_parameter`) are interpreted — as data.
//!
//! Containers live in an arena ([`Pickle::objs`]) addressed by index, so memo references
//! (`GET`) are O(1) copies: a hostile stream cannot multiply memory by referencing one
//! object many times. Every opcode creates at most one arena object and strings are bounded
//! by the input, so memory is linear in the input length.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{CkptError, Result};

/// Index of an object in a [`Pickle`]'s arena.
pub type ObjId = u32;

/// A pickled value; containers are arena references.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Python `None`.
    None,
    /// Python `bool`.
    Bool(bool),
    /// An `int` that fits in 64 bits.
    Int(i64),
    /// An `int` that does not fit: little-endian two's complement bytes, kept inert.
    BigInt(Arc<[u8]>),
    /// Python `float`.
    Float(f64),
    /// Python `str`.
    Str(Arc<str>),
    /// Python `bytes`/`bytearray`.
    Bytes(Arc<[u8]>),
    /// A container or object in the arena.
    Obj(ObjId),
}

/// A torch storage named by a `BINPERSID` persistent id.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageRef {
    /// The storage class's name (`FloatStorage`, `BFloat16Storage`, …).
    pub type_name: String,
    /// Entry key inside the archive's `data/` folder.
    pub key: String,
    /// Declared number of elements.
    pub numel: u64,
}

/// A tensor rebuilt by `torch._utils._rebuild_tensor_v2`, as a view on a storage.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRef {
    /// The storage the tensor views.
    pub storage: StorageRef,
    /// Offset into the storage, in elements.
    pub offset: u64,
    /// Logical shape.
    pub shape: Vec<u64>,
    /// Strides in elements.
    pub stride: Vec<u64>,
}

/// An arena object.
#[derive(Debug, Clone, PartialEq)]
pub enum Obj {
    /// A `list`.
    List(Vec<Value>),
    /// A `tuple` (also `torch.Size`).
    Tuple(Vec<Value>),
    /// A `dict` or `OrderedDict`, in insertion order.
    Dict(Vec<(Value, Value)>),
    /// A `set` or `frozenset`.
    Set(Vec<Value>),
    /// A global reference `module.name`, never resolved.
    Global {
        /// Module path.
        module: String,
        /// Attribute name.
        name: String,
    },
    /// An object whose construction was recorded, not performed (`REDUCE`, `NEWOBJ`, `BUILD`).
    Instance {
        /// The callable or class.
        func: Value,
        /// Its arguments.
        args: Value,
        /// State given by `BUILD`, if any.
        state: Option<Value>,
        /// Items given by `SETITEM(S)` / `APPEND(S)` on a non-container.
        items: Vec<(Value, Value)>,
    },
    /// A persistent id that is not a torch storage.
    PersId(Value),
    /// A torch storage reference.
    Storage(StorageRef),
    /// A torch tensor view.
    Tensor(TensorRef),
}

/// A parsed pickle: the root value and the arena of objects it refers to.
#[derive(Debug, Clone)]
pub struct Pickle {
    /// The value `STOP` returned.
    pub root: Value,
    /// Arena of containers and objects.
    pub objs: Vec<Obj>,
}

/// How deep helpers such as [`Pickle::flatten_dict`] follow nested containers (cycles are possible).
pub const MAX_DEPTH: usize = 64;

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    op_pos: usize,
    stack: Vec<Value>,
    marks: Vec<Vec<Value>>,
    memo: HashMap<u64, Value>,
    objs: Vec<Obj>,
}

/// Parses a pickle stream without executing anything.
pub fn parse(data: &[u8]) -> Result<Pickle> {
    let mut m = Machine {
        data,
        pos: 0,
        op_pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        objs: Vec::new(),
    };
    let root = m.run()?;
    Ok(Pickle { root, objs: m.objs })
}

impl<'a> Machine<'a> {
    fn err<T>(&self, reason: impl Into<String>) -> Result<T> {
        Err(CkptError::Pickle {
            pos: self.op_pos,
            reason: reason.into(),
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(e) => {
                let s = &self.data[self.pos..e];
                self.pos = e;
                Ok(s)
            }
            None => self.err(format!("needs {n} bytes but the stream ends (truncated)")),
        }
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn line(&mut self) -> Result<&'a [u8]> {
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&c| c == b'\n') {
            Some(i) => {
                self.pos += i + 1;
                Ok(&rest[..i])
            }
            None => self.err("text argument has no terminating newline (truncated)"),
        }
    }

    fn len_arg(&mut self, n: u64) -> Result<usize> {
        let remaining = (self.data.len() - self.pos) as u64;
        if n > remaining {
            return self.err(format!("declares {n} bytes but only {remaining} remain"));
        }
        Ok(n as usize)
    }

    fn push(&mut self, v: Value) {
        self.stack.push(v);
    }

    fn pop(&mut self) -> Result<Value> {
        match self.stack.pop() {
            Some(v) => Ok(v),
            None => self.err("stack underflow (or pop across a MARK)"),
        }
    }

    fn top(&self) -> Result<&Value> {
        match self.stack.last() {
            Some(v) => Ok(v),
            None => self.err("empty stack"),
        }
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>> {
        match self.marks.pop() {
            Some(prev) => Ok(std::mem::replace(&mut self.stack, prev)),
            None => self.err("no MARK to pop to"),
        }
    }

    fn alloc(&mut self, o: Obj) -> Result<Value> {
        if self.objs.len() >= u32::MAX as usize {
            return self.err("too many objects");
        }
        self.objs.push(o);
        Ok(Value::Obj((self.objs.len() - 1) as u32))
    }

    fn string(&self, b: &[u8]) -> Result<Value> {
        match std::str::from_utf8(b) {
            Ok(s) => Ok(Value::Str(Arc::from(s))),
            Err(_) => self.err("string is not valid UTF-8"),
        }
    }

    fn global(&mut self, module: String, name: String) -> Result<Value> {
        self.alloc(Obj::Global { module, name })
    }

    fn global_name(&self, v: &Value) -> Option<(&str, &str)> {
        match v {
            Value::Obj(i) => match self.objs.get(*i as usize) {
                Some(Obj::Global { module, name }) => Some((module.as_str(), name.as_str())),
                _ => None,
            },
            _ => None,
        }
    }

    fn tuple_items(&self, v: &Value) -> Option<Vec<Value>> {
        match v {
            Value::Obj(i) => match self.objs.get(*i as usize) {
                Some(Obj::Tuple(t)) | Some(Obj::List(t)) => Some(t.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    fn ints(&self, v: &Value) -> Option<Vec<u64>> {
        let items = self.tuple_items(v)?;
        items
            .iter()
            .map(|x| {
                if let Value::Int(i) = x {
                    u64::try_from(*i).ok()
                } else {
                    None
                }
            })
            .collect()
    }

    fn reduce(&mut self, func: Value, args: Value) -> Result<Value> {
        let name = self
            .global_name(&func)
            .map(|(m, n)| (m.to_string(), n.to_string()));
        if let Some((module, name)) = name {
            match (module.as_str(), name.as_str()) {
                ("collections", "OrderedDict") | ("builtins", "dict") => {
                    let mut pairs = Vec::new();
                    if let Some(items) = self.tuple_items(&args)
                        && let Some(first) = items.first()
                        && let Some(list) = self.tuple_items(first)
                    {
                        for p in list {
                            if let Some(kv) = self.tuple_items(&p)
                                && kv.len() == 2
                            {
                                pairs.push((kv[0].clone(), kv[1].clone()));
                            }
                        }
                    }
                    return self.alloc(Obj::Dict(pairs));
                }
                ("torch", "Size") => {
                    if let Some(items) = self.tuple_items(&args)
                        && let Some(first) = items.first()
                        && let Some(dims) = self.tuple_items(first)
                    {
                        return self.alloc(Obj::Tuple(dims));
                    }
                }
                ("torch._utils", "_rebuild_tensor_v2") | ("torch._utils", "_rebuild_tensor") => {
                    let a = match self.tuple_items(&args) {
                        Some(a) if a.len() >= 4 => a,
                        _ => {
                            return self.err(
                                "_rebuild_tensor_v2 needs (storage, offset, size, stride, …)",
                            );
                        }
                    };
                    let storage = match &a[0] {
                        Value::Obj(i) => match self.objs.get(*i as usize) {
                            Some(Obj::Storage(s)) => s.clone(),
                            _ => {
                                return self
                                    .err("_rebuild_tensor_v2: first argument is not a storage");
                            }
                        },
                        _ => {
                            return self.err("_rebuild_tensor_v2: first argument is not a storage");
                        }
                    };
                    let offset = match a[1] {
                        Value::Int(o) if o >= 0 => o as u64,
                        _ => {
                            return self.err(
                                "_rebuild_tensor_v2: storage offset is not a non-negative int",
                            );
                        }
                    };
                    let (Some(shape), Some(stride)) = (self.ints(&a[2]), self.ints(&a[3])) else {
                        return self.err(
                            "_rebuild_tensor_v2: size/stride are not tuples of non-negative ints",
                        );
                    };
                    if shape.len() != stride.len() {
                        return self.err("_rebuild_tensor_v2: size and stride differ in length");
                    }
                    return self.alloc(Obj::Tensor(TensorRef {
                        storage,
                        offset,
                        shape,
                        stride,
                    }));
                }
                ("torch._utils", "_rebuild_parameter")
                | ("torch._utils", "_rebuild_parameter_with_state") => {
                    if let Some(a) = self.tuple_items(&args)
                        && let Some(first) = a.first()
                    {
                        return Ok(first.clone());
                    }
                }
                _ => {}
            }
        }
        self.alloc(Obj::Instance {
            func,
            args,
            state: None,
            items: Vec::new(),
        })
    }

    fn persistent(&mut self, pid: Value) -> Result<Value> {
        if let Some(t) = self.tuple_items(&pid)
            && t.len() == 5
            && matches!(&t[0], Value::Str(s) if &**s == "storage")
        {
            let type_name = match self.global_name(&t[1]) {
                Some((_, n)) => n.to_string(),
                None => {
                    return self.err("storage persistent id: second item is not a storage class");
                }
            };
            let key = match &t[2] {
                Value::Str(s) => s.to_string(),
                _ => return self.err("storage persistent id: key is not a string"),
            };
            let numel = match t[4] {
                Value::Int(n) if n >= 0 => n as u64,
                _ => {
                    return self
                        .err("storage persistent id: element count is not a non-negative int");
                }
            };
            return self.alloc(Obj::Storage(StorageRef {
                type_name,
                key,
                numel,
            }));
        }
        self.alloc(Obj::PersId(pid))
    }

    fn obj_mut(&mut self, v: &Value) -> Option<&mut Obj> {
        match v {
            Value::Obj(i) => self.objs.get_mut(*i as usize),
            _ => None,
        }
    }

    fn set_items(&mut self, target: Value, kvs: Vec<Value>) -> Result<()> {
        if !kvs.len().is_multiple_of(2) {
            return self.err("SETITEMS with an odd number of items");
        }
        let mut it = kvs.into_iter();
        let mut pairs = Vec::new();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            pairs.push((k, v));
        }
        match self.obj_mut(&target) {
            Some(Obj::Dict(d)) => d.extend(pairs),
            Some(Obj::Instance { items, .. }) => items.extend(pairs),
            _ => return self.err("SETITEM(S) on something that is not a dict"),
        }
        Ok(())
    }

    fn append(&mut self, target: Value, vals: Vec<Value>) -> Result<()> {
        match self.obj_mut(&target) {
            Some(Obj::List(l)) | Some(Obj::Set(l)) => l.extend(vals),
            Some(Obj::Instance { items, .. }) => {
                items.extend(vals.into_iter().map(|v| (Value::None, v)))
            }
            _ => return self.err("APPEND(S) on something that is not a list"),
        }
        Ok(())
    }

    fn memo_get(&self, k: u64) -> Result<Value> {
        match self.memo.get(&k) {
            Some(v) => Ok(v.clone()),
            None => self.err(format!("memo key {k} was never stored")),
        }
    }

    fn int_line(&self, s: &[u8]) -> Result<Value> {
        let t = std::str::from_utf8(s).unwrap_or("").trim_end_matches('L');
        match t {
            "00" => Ok(Value::Bool(false)),
            "01" => Ok(Value::Bool(true)),
            _ => match t.parse::<i64>() {
                Ok(i) => Ok(Value::Int(i)),
                Err(_) => self.err("INT/LONG text is not a 64-bit integer"),
            },
        }
    }

    fn long_bytes(&self, b: &[u8]) -> Value {
        if b.is_empty() {
            return Value::Int(0);
        }
        if b.len() <= 8 {
            let neg = b[b.len() - 1] & 0x80 != 0;
            let mut a = if neg { [0xFFu8; 8] } else { [0u8; 8] };
            a[..b.len()].copy_from_slice(b);
            return Value::Int(i64::from_le_bytes(a));
        }
        Value::BigInt(Arc::from(b))
    }

    fn run(&mut self) -> Result<Value> {
        loop {
            self.op_pos = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let p = self.u8()?;
                    if p > 5 {
                        return self.err(format!("protocol {p} is newer than 5"));
                    }
                }
                0x95 => {
                    self.u64()?; // FRAME: a length hint only
                }
                b'.' => {
                    let v = self.pop()?;
                    return Ok(v);
                }
                b'(' => {
                    let prev = std::mem::take(&mut self.stack);
                    self.marks.push(prev);
                }
                b'0' => {
                    if self.stack.is_empty() {
                        self.pop_mark()?;
                    } else {
                        self.pop()?;
                    }
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?.clone();
                    self.push(v);
                }
                b'N' => self.push(Value::None),
                0x88 => self.push(Value::Bool(true)),
                0x89 => self.push(Value::Bool(false)),
                b'K' => {
                    let v = self.u8()?;
                    self.push(Value::Int(v as i64))
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Value::Int(v as i64))
                }
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Value::Int(v as i64))
                }
                b'I' | b'L' => {
                    let l = self.line()?;
                    let v = self.int_line(l)?;
                    self.push(v)
                }
                0x8a => {
                    let n = self.u8()? as u64;
                    let n = self.len_arg(n)?;
                    let b = self.take(n)?;
                    let v = self.long_bytes(b);
                    self.push(v)
                }
                0x8b => {
                    let n = self.u32()? as u64;
                    let n = self.len_arg(n)?;
                    let b = self.take(n)?;
                    let v = self.long_bytes(b);
                    self.push(v)
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push(Value::Float(f64::from_be_bytes(a)))
                }
                b'F' => {
                    let l = self.line()?;
                    match std::str::from_utf8(l)
                        .ok()
                        .and_then(|s| s.parse::<f64>().ok())
                    {
                        Some(f) => self.push(Value::Float(f)),
                        None => return self.err("FLOAT text is not a number"),
                    }
                }
                b'X' => {
                    let n = self.u32()? as u64;
                    let n = self.len_arg(n)?;
                    let b = self.take(n)?;
                    let v = self.string(b)?;
                    self.push(v)
                }
                0x8c => {
                    let n = self.u8()? as u64;
                    let n = self.len_arg(n)?;
                    let b = self.take(n)?;
                    let v = self.string(b)?;
                    self.push(v)
                }
                0x8d => {
                    let n = self.u64()?;
                    let n = self.len_arg(n)?;
                    let b = self.take(n)?;
                    let v = self.string(b)?;
                    self.push(v)
                }
                b'V' => {
                    let l = self.line()?;
                    let v = self.string(l)?;
                    self.push(v)
                }
                b'T' | b'B' => {
                    let n = self.u32()? as u64;
                    let n = self.len_arg(n)?;
                    let b = self.take(n)?;
                    self.push(Value::Bytes(Arc::from(b)))
                }
                b'U' | b'C' => {
                    let n = self.u8()? as u64;
                    let n = self.len_arg(n)?;
                    let b = self.take(n)?;
                    self.push(Value::Bytes(Arc::from(b)))
                }
                0x8e | 0x96 => {
                    let n = self.u64()?;
                    let n = self.len_arg(n)?;
                    let b = self.take(n)?;
                    self.push(Value::Bytes(Arc::from(b)))
                }
                b'S' => {
                    let l = self.line()?;
                    let s = l
                        .strip_prefix(b"'")
                        .and_then(|s| s.strip_suffix(b"'"))
                        .unwrap_or(l);
                    self.push(Value::Bytes(Arc::from(s)))
                }
                0x97 => return self.err("NEXT_BUFFER (out-of-band buffers) is not supported"),
                0x98 => {} // READONLY_BUFFER: no-op on our inert bytes
                b']' => {
                    let v = self.alloc(Obj::List(Vec::new()))?;
                    self.push(v)
                }
                b'}' => {
                    let v = self.alloc(Obj::Dict(Vec::new()))?;
                    self.push(v)
                }
                b')' => {
                    let v = self.alloc(Obj::Tuple(Vec::new()))?;
                    self.push(v)
                }
                0x8f => {
                    let v = self.alloc(Obj::Set(Vec::new()))?;
                    self.push(v)
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    let v = self.alloc(Obj::List(items))?;
                    self.push(v)
                }
                b't' => {
                    let items = self.pop_mark()?;
                    let v = self.alloc(Obj::Tuple(items))?;
                    self.push(v)
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    let v = self.alloc(Obj::Set(items))?;
                    self.push(v)
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return self.err("TUPLE1/2/3 with too few items on the stack");
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.alloc(Obj::Tuple(items))?;
                    self.push(v)
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    let d = self.alloc(Obj::Dict(Vec::new()))?;
                    self.set_items(d.clone(), items)?;
                    self.push(d)
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.top()?.clone();
                    self.set_items(d, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let d = self.top()?.clone();
                    self.set_items(d, items)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    let l = self.top()?.clone();
                    self.append(l, vec![v])?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    let l = self.top()?.clone();
                    self.append(l, items)?;
                }
                b'c' => {
                    let m = self.line()?;
                    let n = self.line()?;
                    let (m, n) = (
                        String::from_utf8_lossy(m).into_owned(),
                        String::from_utf8_lossy(n).into_owned(),
                    );
                    let v = self.global(m, n)?;
                    self.push(v)
                }
                0x93 => {
                    let n = self.pop()?;
                    let m = self.pop()?;
                    let (Value::Str(m), Value::Str(n)) = (m, n) else {
                        return self.err("STACK_GLOBAL needs two strings");
                    };
                    let v = self.global(m.to_string(), n.to_string())?;
                    self.push(v)
                }
                b'R' => {
                    let args = self.pop()?;
                    let func = self.pop()?;
                    let v = self.reduce(func, args)?;
                    self.push(v)
                }
                0x81 => {
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let v = self.reduce(cls, args)?;
                    self.push(v)
                }
                0x92 => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let v = self.reduce(cls, args)?;
                    self.push(v)
                }
                b'b' => {
                    let st = self.pop()?;
                    let target = self.top()?.clone();
                    match self.obj_mut(&target) {
                        Some(Obj::Instance { state, .. }) => *state = Some(st),
                        // OrderedDict/_metadata and similar attribute state on containers: dropped.
                        Some(_) => {}
                        None => return self.err("BUILD on a plain value"),
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.persistent(pid)?;
                    self.push(v)
                }
                b'P' => {
                    let l = self.line()?;
                    let s = self.string(l)?;
                    let v = self.persistent(s)?;
                    self.push(v)
                }
                b'p' => {
                    let l = self.line()?;
                    let k = std::str::from_utf8(l)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok());
                    let Some(k) = k else {
                        return self.err("PUT key is not an integer");
                    };
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                b'q' => {
                    let k = self.u8()? as u64;
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                b'r' => {
                    let k = self.u32()? as u64;
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    let v = self.top()?.clone();
                    self.memo.insert(k, v);
                }
                b'g' => {
                    let l = self.line()?;
                    let k = std::str::from_utf8(l)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok());
                    let Some(k) = k else {
                        return self.err("GET key is not an integer");
                    };
                    let v = self.memo_get(k)?;
                    self.push(v)
                }
                b'h' => {
                    let k = self.u8()? as u64;
                    let v = self.memo_get(k)?;
                    self.push(v)
                }
                b'j' => {
                    let k = self.u32()? as u64;
                    let v = self.memo_get(k)?;
                    self.push(v)
                }
                0x82..=0x84 => {
                    return self.err("EXT opcodes (copyreg extension registry) are not supported");
                }
                b'i' | b'o' => {
                    return self.err("INST/OBJ (protocol 0/1 instance creation) are not supported");
                }
                other => return self.err(format!("unknown opcode 0x{other:02x}")),
            }
        }
    }
}

impl Pickle {
    /// The arena object a value refers to, if it is a container/object.
    pub fn obj(&self, v: &Value) -> Option<&Obj> {
        match v {
            Value::Obj(i) => self.objs.get(*i as usize),
            _ => None,
        }
    }

    /// The (key, value) pairs of a dict value.
    pub fn dict(&self, v: &Value) -> Option<&[(Value, Value)]> {
        match self.obj(v)? {
            Obj::Dict(d) => Some(d),
            _ => None,
        }
    }

    /// Looks up a string key in a dict value.
    pub fn get<'s>(&'s self, v: &Value, key: &str) -> Option<&'s Value> {
        self.dict(v)?
            .iter()
            .rev()
            .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key))
            .map(|(_, v)| v)
    }

    /// Items of a list or tuple value.
    pub fn seq(&self, v: &Value) -> Option<&[Value]> {
        match self.obj(v)? {
            Obj::List(l) | Obj::Tuple(l) => Some(l),
            _ => None,
        }
    }

    /// The attribute dict of a recorded object (its `BUILD` state, or the dict part of `(dict, slots)`).
    pub fn attrs<'s>(&'s self, v: &Value) -> Option<&'s Value> {
        match self.obj(v)? {
            Obj::Instance { state: Some(s), .. } => {
                if self.dict(s).is_some() {
                    Some(s)
                } else {
                    self.seq(s)
                        .and_then(|t| t.iter().find(|x| self.dict(x).is_some()))
                }
            }
            _ => None,
        }
    }

    /// Reads attribute `name` of a recorded object (e.g. `argparse.Namespace`).
    pub fn attr<'s>(&'s self, v: &Value, name: &str) -> Option<&'s Value> {
        self.get(self.attrs(v)?, name)
    }

    /// `module.name` of the class or function that built a recorded object.
    pub fn class_of(&self, v: &Value) -> Option<(&str, &str)> {
        match self.obj(v)? {
            Obj::Instance { func, .. } => match self.obj(func)? {
                Obj::Global { module, name } => Some((module, name)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The tensor a value holds, if any.
    pub fn tensor(&self, v: &Value) -> Option<&TensorRef> {
        match self.obj(v)? {
            Obj::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// Flattens nested string-keyed dicts into `a.b.c` → value pairs (tensors and non-dict leaves),
    /// following at most [`MAX_DEPTH`] levels.
    pub fn flatten_dict(&self, v: &Value, prefix: &str, out: &mut Vec<(String, Value)>) {
        self.flatten_inner(v, prefix, out, 0);
    }

    fn flatten_inner(&self, v: &Value, prefix: &str, out: &mut Vec<(String, Value)>, depth: usize) {
        match self.dict(v) {
            Some(d) if depth < MAX_DEPTH => {
                for (k, val) in d {
                    if let Value::Str(k) = k {
                        let name = if prefix.is_empty() {
                            k.to_string()
                        } else {
                            format!("{prefix}.{k}")
                        };
                        self.flatten_inner(val, &name, out, depth + 1);
                    }
                }
            }
            _ => out.push((prefix.to_string(), v.clone())),
        }
    }
}

/// Integer view of a value (ints and bools).
pub fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::Bool(b) => Some(*b as i64),
        _ => None,
    }
}

/// Float view of a value (floats and ints).
pub fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Float(f) => Some(*f),
        Value::Int(i) => Some(*i as f64),
        _ => None,
    }
}

/// String view of a value.
pub fn as_str(v: &Value) -> Option<&str> {
    match v {
        Value::Str(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_protocol_4_dict_with_memo() {
        // {'a': [1, 2], 'b': <memo of the list>}
        let p: &[u8] = b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01K\x02e\x8c\x01b\x94h\x02u.";
        let pk = parse(p).unwrap();
        let a = pk.get(&pk.root, "a").unwrap();
        let b = pk.get(&pk.root, "b").unwrap();
        assert_eq!(a, b, "memo GET must return the same object");
        assert_eq!(pk.seq(a).unwrap(), &[Value::Int(1), Value::Int(2)]);
    }

    #[test]
    fn unknown_globals_stay_inert() {
        let p: &[u8] = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.";
        let pk = parse(p).unwrap();
        assert_eq!(pk.class_of(&pk.root), Some(("os", "system")));
    }

    #[test]
    fn long1_decodes_signed() {
        let pk = parse(b"\x80\x02\x8a\x02\xff\x7f.").unwrap();
        assert_eq!(pk.root, Value::Int(0x7fff));
        let pk = parse(b"\x80\x02\x8a\x01\xff.").unwrap();
        assert_eq!(pk.root, Value::Int(-1));
    }

    #[test]
    fn hostile_inputs_are_errors() {
        for bad in [
            &b""[..],
            b"\x80\x02",
            b"\x80\x02X\xff\xff\xff\xff",
            b"\x80\x02h\x05.",
            b"\x80\x02(((((",
            b"\x80\x02s.",
            b"\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\x80\x02K\x01K\x02\x93.",
            b"\x80\x09N.",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
