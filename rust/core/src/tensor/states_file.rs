//! MXNet's optimizer-state file (`.states`): a restricted pickle reader and the writer.
//!
//! MXNet's `Module.save_optimizer_states` writes `pickle.dumps(updater.states)`: a Python dict
//! `{param_index: state}` where a state is an NDArray, `None` or a tuple of states (FORMAT.md
//! §3 of the conformance data). An NDArray is pickled as the global
//! `mxnet.ndarray.ndarray.NDArray` called with `(None,)`, then `BUILD` with the state
//! `{'handle': bytearray(record)}`, `record` being one NDArray record of the `.params` format.
//!
//! - **Reading** ([`decode`], [`load`]) interprets the pickle opcodes such a file needs and
//!   nothing else: no Python code runs and nothing is imported. The only globals are
//!   `mxnet.ndarray.ndarray.NDArray` and `builtins.bytearray`, the only calls (`REDUCE`,
//!   `NEWOBJ`) are on those two, and `BUILD` only gives an NDArray its record. Any other global
//!   (`os.system`, an optimizer object dumped with the states), any other opcode, truncation, an
//!   over-long length or a malformed record is an [`Error::Format`] naming the file, the byte
//!   offset and the problem. Allocation stays proportional to the file size: lengths are checked
//!   against the bytes left, and the decoded arrays and the returned states may not outgrow the
//!   file (a memo reference can repeat an object for a few bytes). Protocols 3 to 5 are read
//!   (Python 3.0–3.7 wrote 3, 3.8+ writes 4); protocol 2 pickles bytes through a `_codecs`
//!   global, so only its array-free files read. The `(states, optimizer)` tuple of MXNet's
//!   `get_states(dump_optimizer=True)` is refused: its optimizer needs a foreign global.
//! - **Writing** ([`encode`], [`save`]) produces what mxfn's Python writer produced (Python's
//!   `pickle` module at protocol 4, the default of Python 3.8+, used by MXNet 1.9.1), byte for
//!   byte, including its framing; for the states of an MXNet file that is the file itself.

use crate::error::{Error, Result};
use crate::optimizer::State;
use crate::tensor::params_file;
use crate::NDArray;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::Path;

/// The optimizer states a `.states` file holds: per parameter index, a state.
pub type OptStates = BTreeMap<usize, State>;

/// Pickle opcodes (the names of Python's `pickletools`).
mod op {
    pub const PROTO: u8 = 0x80;
    pub const FRAME: u8 = 0x95;
    pub const STOP: u8 = b'.';
    pub const MARK: u8 = b'(';
    pub const NONE: u8 = b'N';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const LONG1: u8 = 0x8a;
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE: u8 = b'X';
    pub const BINUNICODE8: u8 = 0x8d;
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const BINBYTES: u8 = b'B';
    pub const BINBYTES8: u8 = 0x8e;
    pub const BYTEARRAY8: u8 = 0x96;
    pub const EMPTY_TUPLE: u8 = b')';
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const TUPLE: u8 = b't';
    pub const EMPTY_DICT: u8 = b'}';
    pub const SETITEM: u8 = b's';
    pub const SETITEMS: u8 = b'u';
    pub const GLOBAL: u8 = b'c';
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const REDUCE: u8 = b'R';
    pub const NEWOBJ: u8 = 0x81;
    pub const BUILD: u8 = b'b';
    pub const MEMOIZE: u8 = 0x94;
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
}

/// The two globals a `.states` file may name, as (module, name).
const NDARRAY_CLASS: (&str, &str) = ("mxnet.ndarray.ndarray", "NDArray");
const BYTEARRAY_CLASS: (&str, &str) = ("builtins", "bytearray");
/// Python's pickler frames its output in chunks of about this size (`_FRAME_SIZE_TARGET`);
/// byte strings at least this long are written outside any frame.
const FRAME_TARGET: usize = 64 * 1024;
/// States nest at most two tuples deep in MXNet; anything much deeper is not a state file.
const MAX_DEPTH: usize = 16;

// -- reading -------------------------------------------------------------------------------------

/// Index of an object in the reader's arena. Objects live in one vector and are referred to by
/// index, so the memo and the stack share them as Python does (`BUILD` and `SETITEM` mutate
/// the object every reference sees) without reference counting or recursive drops.
type Id = usize;

/// The Python values a `.states` pickle can build.
#[derive(Debug)]
enum Obj<'a> {
    None,
    Int(i128),
    Str(String),
    Bytes(&'a [u8]),
    ByteArray(&'a [u8]),
    Tuple(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    /// One of the two allowed classes: `NDArray` (true) or `bytearray` (false).
    Class {
        ndarray: bool,
    },
    /// An NDArray: `None` from `NDArray(None)` until `BUILD` gives it its record.
    NDArray(Option<NDArray>),
}

impl Obj<'_> {
    /// The Python type name, for messages.
    fn kind(&self) -> &'static str {
        match self {
            Obj::None => "None",
            Obj::Int(_) => "int",
            Obj::Str(_) => "str",
            Obj::Bytes(_) => "bytes",
            Obj::ByteArray(_) => "bytearray",
            Obj::Tuple(_) => "tuple",
            Obj::Dict(_) => "dict",
            Obj::Class { .. } => "class",
            Obj::NDArray(_) => "NDArray",
        }
    }
}

/// A stack entry: an object or a `MARK`.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Mark,
    Obj(Id),
}

/// The opcode interpreter: input cursor, object arena, stack and memo.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a str,
    objs: Vec<Obj<'a>>,
    stack: Vec<Slot>,
    memo: HashMap<usize, Id>,
    /// Bytes of array records decoded so far; may not exceed the file size.
    array_bytes: usize,
}

/// Parses the bytes of a `.states` file into states by parameter index; `path` only names the
/// input in errors. See the module docs for what is accepted.
///
/// ```
/// use mxfn_core::tensor::states_file::{decode, encode};
/// use mxfn_core::module::OptStates;
/// use mxfn_core::optimizer::State;
/// use mxfn_core::{DType, NDArray};
/// let mut st = OptStates::new();
/// st.insert(0, State::Array(NDArray::ones(&[2, 3], DType::Float32)));
/// st.insert(1, State::None);
/// let back = decode(&encode(&st), "x.states")?;
/// assert_eq!(back[&0].describe(), "array (2, 3)");
///
/// let err = decode(b"\x80\x04cos\nsystem\n.", "x.states").unwrap_err().to_string();
/// assert!(err.starts_with("x.states: at byte 2: the pickle references os.system"), "{err}");
/// # Ok::<(), mxfn_core::Error>(())
/// ```
pub fn decode(bytes: &[u8], path: &str) -> Result<OptStates> {
    let mut r = Reader {
        buf: bytes,
        pos: 0,
        path,
        objs: Vec::new(),
        stack: Vec::new(),
        memo: HashMap::new(),
        array_bytes: 0,
    };
    let root = r.run()?;
    r.states(root)
}

/// Reads and decodes the `.states` file at `path`. An unreadable file is an [`Error::Io`]
/// naming the path; a malformed one an [`Error::Format`] (see [`decode`]).
pub fn load(path: &Path) -> Result<OptStates> {
    let bytes = crate::limits::read_file(path)?;
    decode(&bytes, &path.display().to_string())
}

impl<'a> Reader<'a> {
    fn err(&self, at: usize, msg: impl std::fmt::Display) -> Error {
        Error::format(self.path, format!("at byte {at}: {msg}"))
    }

    /// The next `n` bytes, or a truncation error naming `what`.
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let at = self.pos;
        let left = self.buf.len() - self.pos.min(self.buf.len());
        let bytes = usize::try_from(n)
            .ok()
            .and_then(|n| self.buf.get(at..at.checked_add(n)?));
        let b = bytes.ok_or_else(|| {
            self.err(
                at,
                format!("the file ends early (truncated?): {what} needs {n} bytes, {left} left"),
            )
        })?;
        self.pos += b.len();
        Ok(b)
    }

    fn uint(&mut self, width: usize, what: &str) -> Result<u64> {
        let b = self.take(width as u64, what)?;
        Ok(b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
    }

    /// Reads a `\n`-terminated line (the text arguments of `GLOBAL`).
    fn line(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let rest = self.buf.get(at..).unwrap_or_default();
        let n = rest.iter().position(|&b| b == b'\n').ok_or_else(|| {
            self.err(
                at,
                format!("the file ends early (truncated?): no end to {what}"),
            )
        })?;
        let text = self.take(n as u64 + 1, what)?;
        let text = text.get(..n).unwrap_or_default();
        String::from_utf8(text.to_vec()).map_err(|_| self.err(at, format!("{what} is not UTF-8")))
    }

    fn obj(&self, id: Id) -> &Obj<'a> {
        // Ids come from `push` only, never from the input, so the fallback is unreachable.
        self.objs.get(id).unwrap_or(&Obj::None)
    }

    fn push(&mut self, o: Obj<'a>) {
        self.objs.push(o);
        self.stack.push(Slot::Obj(self.objs.len() - 1));
    }

    fn pop(&mut self, at: usize) -> Result<Id> {
        match self.stack.pop() {
            Some(Slot::Obj(id)) => Ok(id),
            Some(Slot::Mark) => Err(self.err(at, "an object was expected, found a MARK")),
            None => Err(self.err(at, "the pickle stack is empty (malformed pickle)")),
        }
    }

    fn top(&self, at: usize) -> Result<Id> {
        match self.stack.last() {
            Some(Slot::Obj(id)) => Ok(*id),
            _ => Err(self.err(at, "an object was expected on the pickle stack")),
        }
    }

    /// The objects pushed since the last `MARK`, which is removed.
    fn pop_mark(&mut self, at: usize) -> Result<Vec<Id>> {
        let m = self.stack.iter().rposition(|s| matches!(s, Slot::Mark));
        let m = m.ok_or_else(|| self.err(at, "no MARK on the pickle stack"))?;
        let ids = self.stack.split_off(m);
        Ok(ids
            .into_iter()
            .filter_map(|s| match s {
                Slot::Obj(id) => Some(id),
                Slot::Mark => None,
            })
            .collect())
    }

    fn str(&mut self, at: usize, n: u64) -> Result<()> {
        let b = self.take(n, "a string")?;
        let s = std::str::from_utf8(b).map_err(|_| self.err(at, "a string is not UTF-8"))?;
        self.push(Obj::Str(s.to_string()));
        Ok(())
    }

    /// Runs the opcodes up to `STOP` and returns the object it pops.
    fn run(&mut self) -> Result<Id> {
        loop {
            let at = self.pos;
            let code = self.uint(1, "an opcode")? as u8;
            match code {
                op::PROTO => {
                    let v = self.uint(1, "the protocol")?;
                    if !(2..=5).contains(&v) {
                        return Err(self.err(at, format!("unsupported pickle protocol {v}")));
                    }
                }
                op::FRAME => {
                    // Frames only group opcodes for buffered reading; check the length, go on.
                    let n = self.uint(8, "the frame length")?;
                    let left = (self.buf.len() - self.pos) as u64;
                    if n > left {
                        let msg = format!("a frame of {n} bytes, {left} left");
                        return Err(
                            self.err(at, format!("the file ends early (truncated?): {msg}"))
                        );
                    }
                }
                op::STOP => return self.pop(at),
                op::MARK => self.stack.push(Slot::Mark),
                op::NONE => self.push(Obj::None),
                op::BININT1 => {
                    let v = self.uint(1, "an int")?;
                    self.push(Obj::Int(v.into()));
                }
                op::BININT2 => {
                    let v = self.uint(2, "an int")?;
                    self.push(Obj::Int(v.into()));
                }
                op::BININT => {
                    let v = self.uint(4, "an int")? as u32 as i32;
                    self.push(Obj::Int(v.into()));
                }
                op::LONG1 => {
                    // Little-endian two's complement of n bytes; more than 16 is no index.
                    let n = self.uint(1, "a long's length")?;
                    let b = self.take(n, "a long")?;
                    if n > 16 {
                        return Err(self.err(at, format!("an integer of {n} bytes is too large")));
                    }
                    let neg = b.last().is_some_and(|&x| x >= 0x80);
                    let mut w = [if neg { 0xff } else { 0 }; 16];
                    w.iter_mut().zip(b).for_each(|(w, &x)| *w = x);
                    self.push(Obj::Int(i128::from_le_bytes(w)));
                }
                op::SHORT_BINUNICODE => {
                    let n = self.uint(1, "a string length")?;
                    self.str(at, n)?;
                }
                op::BINUNICODE => {
                    let n = self.uint(4, "a string length")?;
                    self.str(at, n)?;
                }
                op::BINUNICODE8 => {
                    let n = self.uint(8, "a string length")?;
                    self.str(at, n)?;
                }
                op::SHORT_BINBYTES | op::BINBYTES | op::BINBYTES8 | op::BYTEARRAY8 => {
                    let width = match code {
                        op::SHORT_BINBYTES => 1,
                        op::BINBYTES => 4,
                        _ => 8,
                    };
                    let n = self.uint(width, "a bytes length")?;
                    let b = self.take(n, "a bytes object")?;
                    self.push(if code == op::BYTEARRAY8 {
                        Obj::ByteArray(b)
                    } else {
                        Obj::Bytes(b)
                    });
                }
                op::EMPTY_TUPLE => self.push(Obj::Tuple(vec![])),
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let mut items = vec![0; usize::from(code - op::TUPLE1 + 1)];
                    for item in items.iter_mut().rev() {
                        *item = self.pop(at)?;
                    }
                    self.push(Obj::Tuple(items));
                }
                op::TUPLE => {
                    let items = self.pop_mark(at)?;
                    self.push(Obj::Tuple(items));
                }
                op::EMPTY_DICT => self.push(Obj::Dict(vec![])),
                op::SETITEM | op::SETITEMS => {
                    let items = if code == op::SETITEM {
                        let v = self.pop(at)?;
                        vec![self.pop(at)?, v]
                    } else {
                        self.pop_mark(at)?
                    };
                    if items.len() % 2 != 0 {
                        return Err(self.err(at, "SETITEMS with an odd number of items"));
                    }
                    let d = self.top(at)?;
                    let kind = self.obj(d).kind();
                    match self.objs.get_mut(d) {
                        Some(Obj::Dict(pairs)) => {
                            pairs.extend(items.chunks_exact(2).map(|kv| (kv[0], kv[1])))
                        }
                        _ => return Err(self.err(at, format!("SETITEM on a {kind}, not a dict"))),
                    }
                }
                op::GLOBAL => {
                    let module = self.line("a global's module")?;
                    let name = self.line("a global's name")?;
                    self.global(at, &module, &name)?;
                }
                op::STACK_GLOBAL => {
                    let name = self.pop(at)?;
                    let module = self.pop(at)?;
                    match (self.obj(module), self.obj(name)) {
                        (Obj::Str(m), Obj::Str(n)) => {
                            let (m, n) = (m.clone(), n.clone());
                            self.global(at, &m, &n)?;
                        }
                        _ => return Err(self.err(at, "STACK_GLOBAL needs two strings")),
                    }
                }
                op::REDUCE | op::NEWOBJ => {
                    let args = self.pop(at)?;
                    let class = self.pop(at)?;
                    let o = self.call(at, class, args, code == op::NEWOBJ)?;
                    self.push(o);
                }
                op::BUILD => {
                    let state = self.pop(at)?;
                    let target = self.top(at)?;
                    self.build(at, target, state)?;
                }
                op::MEMOIZE | op::BINPUT | op::LONG_BINPUT => {
                    let index = match code {
                        op::MEMOIZE => self.memo.len() as u64,
                        op::BINPUT => self.uint(1, "a memo index")?,
                        _ => self.uint(4, "a memo index")?,
                    };
                    let id = self.top(at)?;
                    self.memo.insert(index as usize, id);
                }
                op::BINGET | op::LONG_BINGET => {
                    let width = if code == op::BINGET { 1 } else { 4 };
                    let index = self.uint(width, "a memo index")?;
                    let id = *self.memo.get(&(index as usize)).ok_or_else(|| {
                        self.err(at, format!("memo entry {index} is not defined"))
                    })?;
                    self.stack.push(Slot::Obj(id));
                }
                c => {
                    let hint = if at == 0 {
                        " (not a pickle of protocol 2 or later, which starts with 0x80)"
                    } else {
                        ""
                    };
                    return Err(self.err(
                        at,
                        format!("pickle opcode 0x{c:02x} is not allowed in a .states file{hint}"),
                    ));
                }
            }
        }
    }

    /// Pushes one of the two allowed classes; any other global is refused, never imported.
    fn global(&mut self, at: usize, module: &str, name: &str) -> Result<()> {
        let ndarray = match (module, name) {
            NDARRAY_CLASS => true,
            BYTEARRAY_CLASS => false,
            _ => {
                let why = if module.starts_with("mxnet.optimizer") {
                    "; this file also holds the optimizer object (MXNet's get_states(\
                     dump_optimizer=True)), which mxfn does not load: save the states alone"
                } else {
                    ""
                };
                return Err(self.err(
                    at,
                    format!(
                        "the pickle references {module}.{name}; a .states file may only hold \
                         MXNet NDArrays, tuples and None{why}"
                    ),
                ));
            }
        };
        self.push(Obj::Class { ndarray });
        Ok(())
    }

    /// `REDUCE` (`class(*args)`) or `NEWOBJ` (`class.__new__(class, *args)`) on an allowed class.
    fn call(&self, at: usize, class: Id, args: Id, newobj: bool) -> Result<Obj<'a>> {
        let Obj::Tuple(args) = self.obj(args) else {
            let kind = self.obj(args).kind();
            return Err(self.err(at, format!("call arguments are a {kind}, not a tuple")));
        };
        let args: Vec<&Obj<'a>> = args.iter().map(|&a| self.obj(a)).collect();
        match (self.obj(class), args.as_slice()) {
            // MXNet's NDArray(handle=None): an array whose record comes with BUILD.
            (Obj::Class { ndarray: true }, a) if a.iter().all(|x| matches!(x, Obj::None)) => {
                Ok(Obj::NDArray(None))
            }
            // bytearray.__new__ ignores its arguments; bytearray(b) copies b.
            (Obj::Class { ndarray: false }, _) if newobj => Ok(Obj::ByteArray(&[])),
            (Obj::Class { ndarray: false }, []) => Ok(Obj::ByteArray(&[])),
            (Obj::Class { ndarray: false }, [Obj::Bytes(b) | Obj::ByteArray(b)]) => {
                Ok(Obj::ByteArray(b))
            }
            (Obj::Class { ndarray }, a) => {
                let class = if *ndarray { "NDArray" } else { "bytearray" };
                let kinds: Vec<&str> = a.iter().map(|x| x.kind()).collect();
                Err(self.err(at, format!("unexpected call {class}({})", kinds.join(", "))))
            }
            (o, _) => Err(self.err(at, format!("a {} called (only classes can be)", o.kind()))),
        }
    }

    /// `BUILD` on an NDArray: decodes the record of the state `{'handle': bytearray(record)}`.
    fn build(&mut self, at: usize, target: Id, state: Id) -> Result<()> {
        if !matches!(self.obj(target), Obj::NDArray(_)) {
            let kind = self.obj(target).kind();
            return Err(self.err(
                at,
                format!("BUILD on a {kind} (only an NDArray takes a state)"),
            ));
        }
        let handle = match self.obj(state) {
            Obj::Dict(pairs) => pairs
                .iter()
                .rev()
                .find(|(k, _)| matches!(self.obj(*k), Obj::Str(s) if s == "handle"))
                .map(|&(_, v)| self.obj(v)),
            _ => None,
        };
        let record = match handle {
            Some(Obj::Bytes(b) | Obj::ByteArray(b)) => *b,
            Some(Obj::None) => return Err(self.err(at, "an NDArray without data (handle None)")),
            _ => {
                let msg = "an NDArray's state must be {'handle': bytearray(record)}";
                return Err(self.err(at, msg));
            }
        };
        // A memo reference can build many arrays from one record for a few bytes each; keep
        // the decoded data within the size of the file.
        self.array_bytes = self.array_bytes.saturating_add(record.len());
        if self.array_bytes > self.buf.len() {
            return Err(self.err(at, "the arrays outgrow the file (records reused)"));
        }
        let what = format!("the NDArray record built at byte {at}");
        let a = params_file::decode_record(record, self.path, &what)?;
        if let Some(o) = self.objs.get_mut(target) {
            *o = Obj::NDArray(Some(a));
        }
        Ok(())
    }

    /// The unpickled object as states: `{index: state}`, or a pair `({index: state}, x)` as
    /// `get_states(dump_optimizer=True)` writes (MXNet's `x`, an optimizer, never gets here:
    /// its class is refused as a foreign global).
    fn states(&self, root: Id) -> Result<OptStates> {
        let bad = |msg: String| Error::format(self.path, msg);
        let root = match self.obj(root) {
            Obj::Tuple(t) if t.len() == 2 && matches!(self.obj(t[0]), Obj::Dict(_)) => t[0],
            _ => root,
        };
        let Obj::Dict(pairs) = self.obj(root) else {
            let kind = self.obj(root).kind();
            return Err(bad(format!(
                "expected a dict parameter index -> state, the pickle holds a {kind}"
            )));
        };
        // Every object of a real file costs at least a byte, and every array its bytes: the
        // states may reference no more values, nor more array bytes, than the file holds
        // (a memo reference repeats an array for a few bytes, and saving the states writes
        // each reference out in full).
        let mut budget = Budget {
            values: self.buf.len(),
            array_bytes: self.buf.len(),
        };
        let mut out = OptStates::new();
        for &(k, v) in pairs {
            let index = match self.obj(k) {
                Obj::Int(i) => {
                    usize::try_from(*i).map_err(|_| bad(format!("negative parameter index {i}")))?
                }
                Obj::Str(s) => {
                    return Err(bad(format!(
                        "the states are keyed by name (\"{s}\"), as MXNet's kvstore writes them \
                         with several devices; mxfn reads states keyed by parameter index"
                    )))
                }
                o => return Err(bad(format!("a parameter index that is a {}", o.kind()))),
            };
            let st = self
                .state(v, 0, &mut budget)
                .map_err(|m| bad(format!("the state of parameter {index}: {m}")))?;
            out.insert(index, st); // a repeated key keeps the later value, as a dict does
        }
        Ok(out)
    }

    fn state(&self, id: Id, depth: usize, budget: &mut Budget) -> Result<State, String> {
        budget.values = budget
            .values
            .checked_sub(1)
            .ok_or("more state values than the file has bytes (objects reused)")?;
        match self.obj(id) {
            Obj::None => Ok(State::None),
            Obj::NDArray(Some(a)) => {
                budget.array_bytes = budget
                    .array_bytes
                    .checked_sub(a.size() * a.dtype().size())
                    .ok_or(
                        "the states reference more array bytes than the file has (arrays reused)",
                    )?;
                Ok(State::Array(a.clone()))
            }
            Obj::NDArray(None) => Err("an NDArray that never got its data (no BUILD)".into()),
            Obj::Tuple(_) if depth >= MAX_DEPTH => {
                Err(format!("tuples nested more than {MAX_DEPTH} deep"))
            }
            Obj::Tuple(items) => items
                .iter()
                .map(|&i| self.state(i, depth + 1, budget))
                .collect::<Result<Vec<_>, _>>()
                .map(State::Tuple),
            o => Err(format!(
                "a {} where an NDArray, a tuple or None belongs",
                o.kind()
            )),
        }
    }
}

/// What the states of one file may still reference (see [`Reader::states`]).
struct Budget {
    /// State values (arrays, tuples, `None`s).
    values: usize,
    /// Bytes of array data, each reference counted.
    array_bytes: usize,
}

// -- writing -------------------------------------------------------------------------------------

/// Serialises `states` as Python's pickler (protocol 4) does for the dict
/// `{index: NDArray | tuple | None}` MXNet pickles, NDArrays as `NDArray(None)` then `BUILD`
/// `{'handle': bytearray(record)}`. Decoding an MXNet 1.9.1 file and encoding the result gives
/// the file back byte for byte.
pub fn encode(states: &OptStates) -> Vec<u8> {
    let mut w = Writer::default();
    w.out.extend([op::PROTO, 4]); // written before framing starts
    w.save();
    w.op(&[op::EMPTY_DICT]);
    w.memoize();
    // Python's _batch_setitems: MARK … SETITEMS per 1000 items, SETITEM for a batch of one.
    let items: Vec<(&usize, &State)> = states.iter().collect();
    for batch in items.chunks(1000) {
        if batch.len() > 1 {
            w.op(&[op::MARK]);
        }
        for (&k, v) in batch {
            w.int(k);
            w.state(v);
        }
        w.op(&[if batch.len() > 1 {
            op::SETITEMS
        } else {
            op::SETITEM
        }]);
    }
    w.op(&[op::STOP]);
    w.commit();
    w.out
}

/// Writes `states` to `path` atomically (as `.params` files are written: a temporary file
/// renamed over `path`); an [`Error::Io`] names `path` on failure.
pub fn save(path: &Path, states: &OptStates) -> Result<()> {
    crate::atomic_file::write(path, &encode(states))
}

/// Python's pickler, reduced to what `encode` needs. Every `save_*` method starts where
/// Python's `Pickler.save` starts, with [`save`](Writer::save), because that is where Python
/// may end a frame: the frames, and so the bytes, only match when the boundaries do.
#[derive(Default)]
struct Writer {
    out: Vec<u8>,
    frame: Vec<u8>,
    memo: usize,
    /// Memo indices of the objects Python's writer reuses: the NDArray class, the `(None,)`
    /// argument tuple (one constant object), the `'handle'` key and the bytearray class.
    ndarray_class: Option<usize>,
    none_args: Option<usize>,
    handle_key: Option<usize>,
    bytearray_class: Option<usize>,
}

impl Writer {
    fn op(&mut self, bytes: &[u8]) {
        self.frame.extend_from_slice(bytes);
    }

    /// Start of `Pickler.save`: `commit_frame()`, which ends a frame of at least 64 KiB.
    fn save(&mut self) {
        if self.frame.len() >= FRAME_TARGET {
            self.commit();
        }
    }

    /// Ends the current frame; frames under 4 bytes get no FRAME header (`_FRAME_SIZE_MIN`).
    fn commit(&mut self) {
        if self.frame.len() >= 4 {
            self.out.push(op::FRAME);
            self.out
                .extend_from_slice(&(self.frame.len() as u64).to_le_bytes());
        }
        self.out.append(&mut self.frame);
    }

    fn memoize(&mut self) -> usize {
        self.op(&[op::MEMOIZE]);
        self.memo += 1;
        self.memo - 1
    }

    fn get(&mut self, index: usize) {
        match u8::try_from(index) {
            Ok(i) => self.op(&[op::BINGET, i]),
            Err(_) => {
                self.op(&[op::LONG_BINGET]);
                self.op(&(index as u32).to_le_bytes());
            }
        }
    }

    /// `save(obj)` of an object memoized at `cached`, else `write(obj)` and memoize it.
    fn memoized(&mut self, cached: Option<usize>, write: impl FnOnce(&mut Self)) -> usize {
        self.save();
        match cached {
            Some(i) => {
                self.get(i);
                i
            }
            None => {
                write(self);
                self.memoize()
            }
        }
    }

    fn str(&mut self, s: &str) {
        // Only the short constant names are written.
        self.memoized(None, |w| {
            w.op(&[op::SHORT_BINUNICODE, s.len() as u8]);
            w.op(s.as_bytes());
        });
    }

    /// `save_global` (STACK_GLOBAL of module and name), memoized.
    fn global(&mut self, cached: Option<usize>, (module, name): (&str, &str)) -> usize {
        self.memoized(cached, |w| {
            w.str(module);
            w.str(name);
            w.op(&[op::STACK_GLOBAL]);
        })
    }

    fn int(&mut self, k: usize) {
        self.save();
        match k {
            0..=0xff => self.op(&[op::BININT1, k as u8]),
            0x100..=0xffff => {
                self.op(&[op::BININT2]);
                self.op(&(k as u16).to_le_bytes());
            }
            0x1_0000..=0x7fff_ffff => {
                self.op(&[op::BININT]);
                self.op(&(k as i32).to_le_bytes());
            }
            _ => {
                // Python's encode_long: bit_length / 8 + 1 bytes of two's complement.
                let n = (usize::BITS - k.leading_zeros()) as usize / 8 + 1;
                let bytes = (k as u128).to_le_bytes();
                self.op(&[op::LONG1, n as u8]);
                self.op(bytes.get(..n).unwrap_or_default());
            }
        }
    }

    fn state(&mut self, s: &State) {
        match s {
            State::None => {
                self.save();
                self.op(&[op::NONE]);
            }
            State::Array(a) => self.ndarray(a),
            // Each state tuple is a new object in Python: never a memo reference.
            State::Tuple(items) => {
                self.save();
                match items.len() {
                    0 => self.op(&[op::EMPTY_TUPLE]), // the empty tuple is not memoized
                    n @ 1..=3 => {
                        items.iter().for_each(|s| self.state(s));
                        self.op(&[op::TUPLE1 + n as u8 - 1]);
                        self.memoize();
                    }
                    _ => {
                        self.op(&[op::MARK]);
                        items.iter().for_each(|s| self.state(s));
                        self.op(&[op::TUPLE]);
                        self.memoize();
                    }
                }
            }
        }
    }

    /// `NDArray(None)`, then `BUILD {'handle': bytearray(record)}` (`save_reduce`).
    fn ndarray(&mut self, a: &NDArray) {
        self.save();
        self.ndarray_class = Some(self.global(self.ndarray_class, NDARRAY_CLASS));
        self.none_args = Some(self.memoized(self.none_args, |w| {
            w.save();
            w.op(&[op::NONE, op::TUPLE1]);
        }));
        self.op(&[op::REDUCE]);
        self.memoize();
        // the state dict, one item
        self.save();
        self.op(&[op::EMPTY_DICT]);
        self.memoize();
        self.handle_key = Some(self.memoized(self.handle_key, |w| {
            w.op(&[op::SHORT_BINUNICODE, 6]);
            w.op(b"handle");
        }));
        // bytearray(record) at protocol 4: REDUCE of the bytearray class on (bytes,)
        self.save();
        self.bytearray_class = Some(self.global(self.bytearray_class, BYTEARRAY_CLASS));
        self.save();
        self.bytes(&params_file::encode_record(a));
        self.op(&[op::TUPLE1]);
        self.memoize();
        self.op(&[op::REDUCE]);
        self.memoize();
        self.op(&[op::SETITEM, op::BUILD]);
    }

    /// `save_bytes`: short and medium strings go into the frame; from 64 KiB on, the current
    /// frame is ended and the bytes are written outside any frame.
    fn bytes(&mut self, b: &[u8]) {
        self.save();
        let n = b.len();
        if n <= 0xff {
            self.op(&[op::SHORT_BINBYTES, n as u8]);
            self.op(b);
        } else if n < FRAME_TARGET {
            self.op(&[op::BINBYTES]);
            self.op(&(n as u32).to_le_bytes());
            self.op(b);
        } else {
            self.commit();
            if let Ok(n32) = u32::try_from(n) {
                self.out.push(op::BINBYTES);
                self.out.extend_from_slice(&n32.to_le_bytes());
            } else {
                self.out.push(op::BINBYTES8);
                self.out.extend_from_slice(&(n as u64).to_le_bytes());
            }
            self.out.extend_from_slice(b);
        }
        self.memoize();
    }
}

#[cfg(test)]
mod tests;
