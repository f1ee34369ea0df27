//! MXNet's binary NDArray-list file (`.params`, `mx.nd.save` / `mx.nd.load`): read, write, atomic save.
//!
//! The layout (FORMAT.md §1 of the conformance data) is a header — `u64` magic `0x112`, a
//! reserved `u64`, the array count N — then N array records, then K names (`u64` length +
//! UTF-8 bytes), where K is 0 for a list and N for a dict. Everything is little-endian.
//!
//! What this module reads and writes, and the choices it makes where MXNet leaves room:
//!
//! - **Writing** ([`encode`], [`save`]) produces what MXNet 1.9.1's `mx.nd.save` writes: V2
//!   dense records, each with its array's own context (`dev_type`, `dev_id`). The one exception
//!   is a 0-d array, which a V2 record cannot hold (V2 `ndim == 0` means "no array"): when a list
//!   contains one, every record is written as V3, as MXNet does under `np_shape(True)` (MXNet
//!   then loads the file only with NumPy-shape semantics on). An empty dict writes the same 32
//!   bytes as an empty list. Dict names are written as given, duplicates included.
//! - **Reading** ([`decode`], [`load`]) accepts V2 and V3 dense records (V3 `ndim == 0` is a
//!   0-d scalar) and the pre-V2 V1 and V0 layouts. It refuses, with an [`Error::Format`] naming
//!   the path, the byte offset and the array or name index:
//!   - sparse records (storage type 1/2): "sparse storage (row_sparse/csr) is not supported";
//!   - type flags mxfn has no dtype for: "bool (type flag 7) is not supported", likewise int16,
//!     uint16, uint32, uint64 and bfloat16 (flags 8–12); any other flag is "unknown";
//!   - records that hold no array (V0/V1/V2 `ndim == 0`, V3 unknown shape `-1`), which
//!     `mx.nd.load` cannot return either;
//!   - a V0 "ndim" above 32: that first word is then taken as an unknown record magic;
//!   - device types other than 1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared, and negative device ids;
//!   - and every malformed file: bad magic, K neither 0 nor N, truncation, negative or
//!     overflowing dimensions, data longer than the bytes left, names that are not UTF-8.
//!
//!   Sizes are checked against the bytes left before anything is allocated, so no input can
//!   make the reader allocate more than about the size of the input, and no input panics.
//! - **Contexts**: a cpu record loads onto `cpu(dev_id)` (so a file re-encodes to the same
//!   bytes); a gpu, cpu_pinned or cpu_shared record loads onto `cpu(0)`, as a CPU-only MXNet does.
//! - **Names**: two equal names give one dict entry holding the later array, at the position of
//!   the first (what Python's dict assignment does).
//! - Bytes after the last name are ignored, as MXNet ignores them.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::tensor::{DType, NDArray};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

/// The first `u64` of every NDArray list file.
const FILE_MAGIC: u64 = 0x112;
/// Record magic of the V1 layout (shape with `i64` dims, no storage type).
const V1_MAGIC: u32 = 0xF993_FAC8;
/// Record magic of the V2 layout, what MXNet writes normally.
const V2_MAGIC: u32 = 0xF993_FAC9;
/// Record magic of the V3 layout, written under NumPy-shape semantics.
const V3_MAGIC: u32 = 0xF993_FACA;
/// A first record word at most this large (and not a V1/V2/V3 magic) is read as a V0 `ndim`;
/// anything larger is an unknown record magic. (No MXNet array ever had more dimensions.)
const V0_MAX_NDIM: u32 = 32;

/// The content of an NDArray list file: the arrays, unnamed (K = 0) or named (K = N).
///
/// ```
/// use mxfn_core::tensor::params_file::NdList;
/// use mxfn_core::{DType, NDArray};
/// let params = NdList::Dict(vec![("arg:fc1_bias".to_string(), NDArray::zeros(&[4], DType::Float32))]);
/// assert!(matches!(params, NdList::Dict(ref d) if d[0].0 == "arg:fc1_bias"));
/// ```
#[derive(Clone, Debug)]
pub enum NdList {
    /// Arrays without names (`mx.nd.save(f, [a, b])`); also what an empty file loads as.
    List(Vec<NDArray>),
    /// Named arrays in file order (`mx.nd.save(f, {"arg:w": a})`, checkpoints).
    Dict(Vec<(String, NDArray)>),
}

/// The record layouts the reader knows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    V0,
    V1,
    V2,
    V3,
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::V0 => "V0",
            Layout::V1 => "V1",
            Layout::V2 => "V2",
            Layout::V3 => "V3",
        })
    }
}

/// Checked little-endian reads over a byte slice; every error names the path, the byte offset
/// and the item being read (`what`: "array 3", "name 0", …).
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a str,
    what: String,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8], path: &'a str) -> Self {
        Cursor {
            buf,
            pos: 0,
            path,
            what: "header".to_string(),
        }
    }

    fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// A format error at byte `at` of the current item.
    fn err(&self, at: usize, msg: impl fmt::Display) -> Error {
        Error::format(self.path, format!("at byte {at} ({}): {msg}", self.what))
    }

    /// The next `n` bytes; a truncation error naming `field` when fewer are left.
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        let at = self.pos;
        let bytes = at.checked_add(n).and_then(|end| self.buf.get(at..end));
        match bytes {
            Some(b) => {
                self.pos = at + n;
                Ok(b)
            }
            None => Err(self.err(
                at,
                format!(
                    "the file ends early: {field} needs {n} bytes, {} left",
                    self.left()
                ),
            )),
        }
    }

    fn word<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let mut w = [0u8; N];
        w.copy_from_slice(self.take(N, field)?);
        Ok(w)
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        self.word(field).map(u32::from_le_bytes)
    }

    fn i32(&mut self, field: &str) -> Result<i32> {
        self.word(field).map(i32::from_le_bytes)
    }

    fn u64(&mut self, field: &str) -> Result<u64> {
        self.word(field).map(u64::from_le_bytes)
    }

    fn i64(&mut self, field: &str) -> Result<i64> {
        self.word(field).map(i64::from_le_bytes)
    }
}

/// Serialises `list` as `mx.nd.save` does: header, one dense record per array (V2; V3 for all
/// records when some array is 0-d, see the module docs), then the names of a dict. Decoding a
/// file MXNet wrote and encoding the result gives the file back byte for byte.
///
/// ```
/// use mxfn_core::tensor::params_file::{decode, encode, NdList};
/// use mxfn_core::NDArray;
/// let w = NDArray::from_vec(&[1, 2], vec![1.0f32, 2.0])?;
/// let bytes = encode(&NdList::Dict(vec![("arg:w".to_string(), w)]));
/// assert_eq!(bytes.len(), 24 + 48 + 8 + 8 + 5); // header, record, K, name length, name
/// assert_eq!(encode(&NdList::List(vec![])), encode(&NdList::Dict(vec![])));
/// # Ok::<(), mxfn_core::Error>(())
/// ```
pub fn encode(list: &NdList) -> Vec<u8> {
    let (arrays, names): (Vec<&NDArray>, Vec<&str>) = match list {
        NdList::List(v) => (v.iter().collect(), Vec::new()),
        NdList::Dict(v) => v.iter().map(|(n, a)| (a, n.as_str())).unzip(),
    };
    // A V2 record cannot hold a 0-d array; MXNet writes V3 for every record under np_shape.
    let magic = if arrays.iter().any(|a| a.ndim() == 0) {
        V3_MAGIC
    } else {
        V2_MAGIC
    };
    let data_len: usize = arrays
        .iter()
        .map(|a| 24 + 8 * a.ndim() + a.size() * a.dtype().size())
        .sum();
    let names_len: usize = names.iter().map(|n| 8 + n.len()).sum();
    let mut out = Vec::with_capacity(32 + data_len + names_len);
    out.extend_from_slice(&FILE_MAGIC.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(arrays.len() as u64).to_le_bytes());
    for a in arrays {
        write_record(&mut out, a, magic);
    }
    out.extend_from_slice(&(names.len() as u64).to_le_bytes());
    for n in names {
        out.extend_from_slice(&(n.len() as u64).to_le_bytes());
        out.extend_from_slice(n.as_bytes());
    }
    out
}

/// Parses the bytes of an NDArray list file; `path` only names the input in errors.
///
/// A file with K = 0 names is a [`NdList::List`], one with K = N a [`NdList::Dict`] in file
/// order (a repeated name keeps its first position and the later array). Every malformed or
/// unsupported input is an [`Error::Format`] naming `path`, the byte offset and what is wrong;
/// see the module docs for what is refused.
///
/// ```
/// use mxfn_core::tensor::params_file::{decode, encode, NdList};
/// use mxfn_core::{DType, NDArray};
/// let m = NDArray::from_vec(&[1], vec![7i64])?;
/// let bytes = encode(&NdList::Dict(vec![("aux:m".to_string(), m)]));
/// let NdList::Dict(d) = decode(&bytes, "m.params")? else { panic!("expected a dict") };
/// assert_eq!((d[0].0.as_str(), d[0].1.dtype(), d[0].1.shape()), ("aux:m", DType::Int64, &[1][..]));
///
/// let err = decode(&bytes[..40], "m.params").unwrap_err().to_string();
/// assert!(err.starts_with("m.params: at byte 36 (array 0): the file ends early"), "{err}");
/// # Ok::<(), mxfn_core::Error>(())
/// ```
pub fn decode(bytes: &[u8], path: &str) -> Result<NdList> {
    let mut c = Cursor::new(bytes, path);
    let magic = c.u64("the file magic")?;
    if magic != FILE_MAGIC {
        return Err(c.err(
            0,
            format!("bad file magic 0x{magic:x}, expected 0x112 (not an MXNet NDArray file)"),
        ));
    }
    c.u64("the reserved word")?; // written as 0, ignored on load like MXNet does
    let n = c.u64("the array count")?;
    // No capacity from `n`: it is untrusted. Each record consumes at least 20 bytes or fails,
    // so the loop ends after at most len/20 iterations.
    let mut arrays = Vec::new();
    for i in 0..n {
        c.what = format!("array {i}");
        arrays.push(read_record(&mut c)?);
    }
    c.what = "names".to_string();
    let at = c.pos;
    let k = c.u64("the name count")?;
    if k == 0 {
        return Ok(NdList::List(arrays));
    }
    if k != n {
        return Err(c.err(
            at,
            format!(
                "name count K = {k} is neither 0 (a list) nor the array count N = {n} (a dict)"
            ),
        ));
    }
    let mut entries: Vec<(String, NDArray)> = Vec::with_capacity(arrays.len());
    let mut index: HashMap<String, usize> = HashMap::new();
    for (j, array) in arrays.into_iter().enumerate() {
        c.what = format!("name {j}");
        let name = read_name(&mut c)?;
        match index.get(&name) {
            Some(&p) => {
                if let Some(e) = entries.get_mut(p) {
                    e.1 = array;
                }
            }
            None => {
                index.insert(name.clone(), entries.len());
                entries.push((name, array));
            }
        }
    }
    Ok(NdList::Dict(entries))
}

/// Appends the dense record of `a` (FORMAT.md §1.2) with the given record magic.
fn write_record(out: &mut Vec<u8>, a: &NDArray, magic: u32) {
    out.extend_from_slice(&magic.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes()); // dense storage
    out.extend_from_slice(&(a.ndim() as i32).to_le_bytes());
    for &d in a.shape() {
        out.extend_from_slice(&(d as i64).to_le_bytes());
    }
    let ctx = a.context();
    out.extend_from_slice(&ctx.dev_type.to_le_bytes());
    out.extend_from_slice(&ctx.dev_id.to_le_bytes());
    out.extend_from_slice(&a.dtype().mxnet_flag().to_le_bytes());
    out.extend_from_slice(&a.to_le_bytes());
}

/// One array record alone, as `mx.nd.save(f, [a])` writes it between the header and the name
/// count (V2; V3 for a 0-d array). MXNet pickles an NDArray as this record (`.states` files).
pub(crate) fn encode_record(a: &NDArray) -> Vec<u8> {
    let magic = if a.ndim() == 0 { V3_MAGIC } else { V2_MAGIC };
    let mut out = Vec::with_capacity(24 + 8 * a.ndim() + a.size() * a.dtype().size());
    write_record(&mut out, a, magic);
    out
}

/// Parses one array record on its own (the payload of a pickled NDArray); `what` names it in
/// errors, whose byte offsets count from the record's start. Bytes after the record are
/// ignored, as MXNet's `MXNDArrayLoadFromRawBytes` ignores them.
pub(crate) fn decode_record(bytes: &[u8], path: &str, what: &str) -> Result<NDArray> {
    let mut c = Cursor::new(bytes, path);
    c.what = what.to_string();
    read_record(&mut c)
}

/// One name: `u64` byte length, then that many bytes of UTF-8.
fn read_name(c: &mut Cursor) -> Result<String> {
    let len = c.u64("the name length")?;
    let at = c.pos;
    let bytes = c.take(usize::try_from(len).unwrap_or(usize::MAX), "the name")?;
    String::from_utf8(bytes.to_vec())
        .map_err(|e| c.err(at, format!("the name is not valid UTF-8 ({e})")))
}

/// One array record (V0–V3), the cursor at its first byte.
fn read_record(c: &mut Cursor) -> Result<NDArray> {
    let start = c.pos;
    let magic = c.u32("the record magic")?;
    let layout = match magic {
        V1_MAGIC => Layout::V1,
        V2_MAGIC => Layout::V2,
        V3_MAGIC => Layout::V3,
        m if m <= V0_MAX_NDIM => Layout::V0,
        m => {
            let known = "V1 is 0xf993fac8, V2 0xf993fac9, V3 0xf993faca";
            let v0 = format!("a V0 record would start with its ndim, at most {V0_MAX_NDIM}");
            return Err(c.err(
                start,
                format!("unknown record magic 0x{m:08x} ({known}; {v0})"),
            ));
        }
    };
    if matches!(layout, Layout::V2 | Layout::V3) {
        let at = c.pos;
        match c.i32("the storage type")? {
            0 => {}
            s @ (1 | 2) => {
                return Err(c.err(
                    at,
                    format!("sparse storage (row_sparse/csr) is not supported (storage type {s})"),
                ))
            }
            s => {
                return Err(c.err(
                    at,
                    format!("unknown storage type {s} (0 dense, 1 row_sparse, 2 csr)"),
                ))
            }
        }
    }
    let shape = read_shape(c, layout, magic, start)?;

    let at = c.pos;
    let dev_type = c.i32("the context's device type")?;
    let dev_id = c.i32("the context's device id")?;
    let ctx = match dev_type {
        1 | 2 | 3 | 5 if dev_id < 0 => {
            return Err(c.err(at, format!("negative device id {dev_id}")))
        }
        1 => Context::cpu(dev_id),
        // gpu, cpu_pinned, cpu_shared: a CPU-only MXNet loads these onto cpu(0) too.
        2 | 3 | 5 => Context::cpu(0),
        t => {
            return Err(c.err(
                at,
                format!("unknown device type {t} (1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared)"),
            ))
        }
    };

    let at = c.pos;
    let flag = c.i32("the type flag")?;
    let dtype = DType::from_mxnet_flag(flag).ok_or_else(|| c.err(at, unsupported_flag(flag)))?;

    let at = c.pos;
    // `read_shape` checked that the element count fits; only the byte count can overflow here.
    let numel = shape.iter().product::<usize>();
    let nbytes = numel.checked_mul(dtype.size()).ok_or_else(|| {
        c.err(
            at,
            format!("a {dtype} array of shape {shape:?} is too large ({numel} elements)"),
        )
    })?;
    if nbytes > c.left() {
        let msg = format!("the data of a {dtype} array of shape {shape:?} needs {nbytes} bytes");
        return Err(c.err(at, format!("the file ends early: {msg}, {} left", c.left())));
    }
    let data = c.take(nbytes, "the data")?;
    let array = NDArray::from_le_bytes(dtype, &shape, data).map_err(|e| c.err(at, e))?;
    Ok(array.as_in_context(ctx))
}

/// The shape of a record: V0 `u32 ndim` (already read as `magic`) and `u32` dims; V1/V2/V3
/// `i32 ndim` and `i64` dims. Refuses records without an array, negative dimensions and shapes
/// whose element count does not fit in memory, before allocating anything.
fn read_shape(c: &mut Cursor, layout: Layout, magic: u32, start: usize) -> Result<Vec<usize>> {
    let no_array = "a record without an array, which mx.nd.load cannot return either";
    let dims: Vec<u64> = if layout == Layout::V0 {
        if magic == 0 {
            return Err(c.err(start, format!("V0 record with ndim 0: {no_array}")));
        }
        let mut dims = Vec::with_capacity(magic as usize); // at most V0_MAX_NDIM
        for _ in 0..magic {
            dims.push(u64::from(c.u32("a V0 dimension")?));
        }
        dims
    } else {
        let at = c.pos;
        let ndim = c.i32("ndim")?;
        if layout == Layout::V3 && ndim == -1 {
            return Err(c.err(
                at,
                format!("V3 record of unknown shape (ndim -1): {no_array}"),
            ));
        }
        if ndim < 0 {
            return Err(c.err(at, format!("negative ndim {ndim}")));
        }
        if ndim == 0 && layout != Layout::V3 {
            return Err(c.err(at, format!("{layout} record with ndim 0: {no_array}")));
        }
        let ndim = ndim as usize;
        if ndim > crate::limits::MAX_NDIM {
            return Err(c.err(
                at,
                format!(
                    "ndim {ndim}: at most {} axes (the limit MAX_NDIM)",
                    crate::limits::MAX_NDIM
                ),
            ));
        }
        // Check the bytes are there before allocating `ndim` dimensions.
        if ndim.saturating_mul(8) > c.left() {
            return Err(c.err(
                c.pos,
                format!(
                    "the file ends early: {ndim} dimensions need {} bytes, {} left",
                    ndim.saturating_mul(8),
                    c.left()
                ),
            ));
        }
        let mut dims = Vec::with_capacity(ndim);
        for d in 0..ndim {
            let at = c.pos;
            let v = c.i64("a dimension")?;
            if layout == Layout::V3 && v == -1 {
                return Err(c.err(
                    at,
                    format!("V3 record of unknown shape (dimension {d} is -1): {no_array}"),
                ));
            }
            let v = u64::try_from(v)
                .map_err(|_| c.err(at, format!("negative dimension {v} (dimension {d})")))?;
            dims.push(v);
        }
        dims
    };
    // The element count, ignoring zero dimensions, must fit in an isize (ndarray's limit) even
    // when a zero dimension makes the array empty.
    let mut nonzero: u64 = 1;
    for &d in dims.iter().filter(|&&d| d != 0) {
        nonzero = match nonzero.checked_mul(d) {
            Some(p) if p <= isize::MAX as u64 => p,
            _ => {
                return Err(c.err(
                    start,
                    format!("shape {dims:?} is too large (its element count overflows)"),
                ))
            }
        };
    }
    // Every dimension is now at most isize::MAX, so it fits a usize.
    Ok(dims.iter().map(|&d| d as usize).collect())
}

/// The error text for a type flag with no mxfn dtype.
fn unsupported_flag(flag: i32) -> String {
    let name = match flag {
        7 => "bool",
        8 => "int16",
        9 => "uint16",
        10 => "uint32",
        11 => "uint64",
        12 => "bfloat16",
        _ => return format!("unknown type flag {flag} (MXNet's flags are 0 to 12)"),
    };
    format!("{name} (type flag {flag}) is not supported: mxfn has no {name} dtype")
}

/// Reads and decodes the NDArray list file at `path`. An unreadable file is an [`Error::Io`]
/// naming the path; a malformed one an [`Error::Format`] (see [`decode`]).
pub fn load(path: &Path) -> Result<NdList> {
    let bytes = crate::limits::read_file(path)?;
    decode(&bytes, &path.display().to_string())
}

/// Writes `list` to `path` atomically through [`crate::atomic_file::write`]: a reader sees the
/// old file or the new one, never a partial one; the file's mode is kept; on failure an
/// [`Error::Io`] names `path`.
///
/// ```
/// use mxfn_core::tensor::params_file::{load, save, NdList};
/// use mxfn_core::{DType, NDArray};
/// let dir = std::env::temp_dir().join(format!("mxfn-doc-save-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).map_err(|e| mxfn_core::Error::Msg(e.to_string()))?;
/// let path = dir.join("model-0001.params");
/// save(&path, &NdList::Dict(vec![("arg:b".to_string(), NDArray::ones(&[3], DType::Float32))]))?;
/// let NdList::Dict(d) = load(&path)? else { panic!("expected a dict") };
/// assert_eq!(d[0].1.to_f64_vec(), vec![1.0, 1.0, 1.0]);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), mxfn_core::Error>(())
/// ```
pub fn save(path: &Path, list: &NdList) -> Result<()> {
    crate::atomic_file::write(path, &encode(list))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Bytes from hex text; `#` starts a comment running to the end of the line.
    fn hex(text: &str) -> Vec<u8> {
        text.lines()
            .flat_map(|l| l.split('#').next().unwrap_or("").split_whitespace())
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    /// FORMAT.md §1.5: `mx.nd.save(f, {"arg:w": [[1.0, 2.0]], "aux:m": int64 [7]})`.
    const WORKED_EXAMPLE: &str = "
        12 01 00 00 00 00 00 00   # magic 0x112
        00 00 00 00 00 00 00 00   # reserved
        02 00 00 00 00 00 00 00   # N = 2
        c9 fa 93 f9               # record 0: V2 magic
        00 00 00 00               #   dense
        02 00 00 00               #   ndim 2
        01 00 00 00 00 00 00 00   #   dim 1
        02 00 00 00 00 00 00 00   #   dim 2
        01 00 00 00 00 00 00 00   #   cpu, 0
        00 00 00 00               #   float32
        00 00 80 3f 00 00 00 40   #   1.0, 2.0
        c9 fa 93 f9               # record 1: V2 magic
        00 00 00 00               #   dense
        01 00 00 00               #   ndim 1
        01 00 00 00 00 00 00 00   #   dim 1
        01 00 00 00 00 00 00 00   #   cpu, 0
        06 00 00 00               #   int64
        07 00 00 00 00 00 00 00   #   7
        02 00 00 00 00 00 00 00   # K = 2
        05 00 00 00 00 00 00 00   # length 5
        61 72 67 3a 77            # arg:w
        05 00 00 00 00 00 00 00   # length 5
        61 75 78 3a 6d            # aux:m
    ";

    /// A V1 float32 (2,) record, a V0 int32 (3,) record and a V2 float64 (1,) record.
    const LEGACY: &str = "
        12 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00  03 00 00 00 00 00 00 00
        c8 fa 93 f9  01 00 00 00  02 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00
        00 00 00 00  00 00 80 3f 00 00 00 40                       # V1 [1.0, 2.0]
        01 00 00 00  03 00 00 00  01 00 00 00 00 00 00 00
        04 00 00 00  07 00 00 00 08 00 00 00 09 00 00 00           # V0 [7, 8, 9]
        c9 fa 93 f9  00 00 00 00  01 00 00 00  01 00 00 00 00 00 00 00
        01 00 00 00 00 00 00 00  01 00 00 00  00 00 00 00 00 00 d0 3f  # V2 [0.25]
        00 00 00 00 00 00 00 00                                    # K = 0
    ";

    fn worked_example() -> NdList {
        NdList::Dict(vec![
            (
                "arg:w".into(),
                NDArray::from_vec(&[1, 2], vec![1.0f32, 2.0]).unwrap(),
            ),
            ("aux:m".into(), NDArray::from_vec(&[1], vec![7i64]).unwrap()),
        ])
    }

    /// A dense V2 record (V3 with `v3`) with free-form fields, for malformed inputs.
    fn record(v3: bool, dims: &[i64], ctx: (i32, i32), flag: i32, data: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&(if v3 { V3_MAGIC } else { V2_MAGIC }).to_le_bytes());
        r.extend_from_slice(&0i32.to_le_bytes());
        r.extend_from_slice(&(dims.len() as i32).to_le_bytes());
        dims.iter()
            .for_each(|d| r.extend_from_slice(&d.to_le_bytes()));
        r.extend_from_slice(&ctx.0.to_le_bytes());
        r.extend_from_slice(&ctx.1.to_le_bytes());
        r.extend_from_slice(&flag.to_le_bytes());
        r.extend_from_slice(data);
        r
    }

    /// A file of `records` with `names` (none: a list).
    fn file(records: &[Vec<u8>], names: &[&[u8]]) -> Vec<u8> {
        let mut f = hex("12 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00");
        f.extend_from_slice(&(records.len() as u64).to_le_bytes());
        records.iter().for_each(|r| f.extend_from_slice(r));
        f.extend_from_slice(&(names.len() as u64).to_le_bytes());
        for n in names {
            f.extend_from_slice(&(n.len() as u64).to_le_bytes());
            f.extend_from_slice(n);
        }
        f
    }

    fn err(bytes: &[u8]) -> String {
        match decode(bytes, "t.params") {
            Err(e @ Error::Format { .. }) => e.to_string(),
            Err(e) => panic!("expected a Format error, got {e:?}"),
            Ok(l) => panic!("expected an error, got {l:?}"),
        }
    }

    fn dict(l: NdList) -> Vec<(String, NDArray)> {
        match l {
            NdList::Dict(d) => d,
            NdList::List(l) => panic!("expected a dict, got a list of {}", l.len()),
        }
    }

    fn list(l: NdList) -> Vec<NDArray> {
        match l {
            NdList::List(l) => l,
            NdList::Dict(d) => panic!("expected a list, got a dict of {}", d.len()),
        }
    }

    fn f1(v: f32) -> Vec<u8> {
        v.to_le_bytes().to_vec()
    }

    #[test]
    fn worked_example_byte_for_byte() {
        let bytes = hex(WORKED_EXAMPLE);
        assert_eq!(bytes.len(), 146);
        assert_eq!(encode(&worked_example()), bytes);
        let d = dict(decode(&bytes, "w.params").unwrap());
        let names: Vec<&str> = d.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["arg:w", "aux:m"]);
        assert_eq!(
            (d[0].1.dtype(), d[0].1.shape()),
            (DType::Float32, &[1, 2][..])
        );
        assert_eq!(d[0].1.to_f64_vec(), [1.0, 2.0]);
        assert_eq!(
            (d[1].1.dtype(), d[1].1.to_f64_vec()),
            (DType::Int64, vec![7.0])
        );
        assert_eq!(d[0].1.context(), Context::cpu(0));
        assert_eq!(encode(&NdList::Dict(d)), bytes);
    }

    #[test]
    fn empty_list_and_empty_dict_write_the_same_32_bytes() {
        let e = encode(&NdList::List(vec![]));
        assert_eq!(e, hex("12 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00"));
        assert_eq!(encode(&NdList::Dict(vec![])), e);
        assert!(list(decode(&e, "e").unwrap()).is_empty());
    }

    #[test]
    fn legacy_v0_v1_records_load() {
        let l = list(decode(&hex(LEGACY), "legacy").unwrap());
        assert_eq!(l.len(), 3);
        assert_eq!(
            (l[0].dtype(), l[0].to_f64_vec()),
            (DType::Float32, vec![1.0, 2.0])
        );
        assert_eq!(
            (l[1].dtype(), l[1].to_f64_vec()),
            (DType::Int32, vec![7.0, 8.0, 9.0])
        );
        assert_eq!(
            (l[2].dtype(), l[2].to_f64_vec()),
            (DType::Float64, vec![0.25])
        );
    }

    #[test]
    fn zero_d_arrays_are_written_and_read_as_v3() {
        let s = NDArray::from_vec(&[], vec![3.5f32]).unwrap();
        let v = NDArray::from_vec(&[2], vec![1i32, 2]).unwrap();
        let bytes = encode(&NdList::List(vec![s, v.clone()]));
        assert_eq!(bytes[24..28], V3_MAGIC.to_le_bytes());
        assert_eq!(bytes[52..56], V3_MAGIC.to_le_bytes()); // every record switches to V3
        let l = list(decode(&bytes, "s").unwrap());
        assert_eq!((l[0].shape(), l[0].to_f64_vec()), (&[][..], vec![3.5]));
        assert_eq!(l[1].to_le_bytes(), v.to_le_bytes());
        // Without a 0-d array the file stays V2.
        assert_eq!(
            encode(&NdList::List(vec![v]))[24..28],
            V2_MAGIC.to_le_bytes()
        );
    }

    #[test]
    fn contexts_keep_the_cpu_id_and_move_other_devices_to_cpu0() {
        let recs = [
            record(false, &[1], (1, 2), 0, &f1(1.0)),
            record(false, &[1], (2, 1), 0, &f1(2.0)),
            record(false, &[1], (3, 0), 0, &f1(3.0)),
            record(false, &[1], (5, 4), 0, &f1(4.0)),
        ];
        let bytes = file(&recs, &[]);
        let l = list(decode(&bytes, "c").unwrap());
        let ctxs: Vec<Context> = l.iter().map(|a| a.context()).collect();
        assert_eq!(
            ctxs,
            [
                Context::cpu(2),
                Context::cpu(0),
                Context::cpu(0),
                Context::cpu(0)
            ]
        );
        // cpu(2) is written back as (1, 2).
        assert_eq!(encode(&NdList::List(l))[..24 + 36], bytes[..24 + 36]);
        assert!(err(&file(&[record(false, &[1], (4, 0), 0, &f1(1.0))], &[]))
            .contains("unknown device type 4"));
        assert!(
            err(&file(&[record(false, &[1], (1, -1), 0, &f1(1.0))], &[]))
                .contains("negative device id -1")
        );
    }

    #[test]
    fn duplicate_names_keep_the_first_position_and_the_later_array() {
        let recs: Vec<Vec<u8>> = (0..3)
            .map(|i| record(false, &[1], (1, 0), 0, &f1(i as f32)))
            .collect();
        let d = dict(decode(&file(&recs, &[b"a", b"b", b"a"]), "dup").unwrap());
        let got: Vec<(&str, f64)> = d
            .iter()
            .map(|(n, a)| (n.as_str(), a.to_f64_vec()[0]))
            .collect();
        assert_eq!(got, [("a", 2.0), ("b", 1.0)]);
    }

    #[test]
    fn k_must_be_zero_or_n() {
        let mut bytes = hex(WORKED_EXAMPLE);
        bytes[112] = 1; // K = 1 with N = 2
        let e = err(&bytes);
        assert!(
            e.starts_with("t.params: at byte 112 (names): name count K = 1 is neither 0"),
            "{e}"
        );
        bytes[112] = 3;
        assert!(err(&bytes).contains("K = 3"));
    }

    #[test]
    fn malformed_inputs_name_the_offset_and_the_problem() {
        let one = |r: Vec<u8>| file(&[r], &[]);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (hex("13 01 00 00 00 00 00 00"), "at byte 0 (header): bad file magic 0x113"),
            (hex("12 01 00 00"), "at byte 0 (header): the file ends early: the file magic needs 8 bytes, 4 left"),
            (one(hex("ef be ad de")), "at byte 24 (array 0): unknown record magic 0xdeadbeef"),
            (one(record(false, &[1], (1, 0), 13, &[])), "at byte 52 (array 0): unknown type flag 13"),
            (one(record(false, &[1], (1, 0), 7, &[1])), "at byte 52 (array 0): bool (type flag 7) is not supported"),
            (one(record(false, &[1], (1, 0), 12, &[0, 0])), "bfloat16 (type flag 12) is not supported"),
            (one(record(false, &[2, -3], (1, 0), 0, &[])), "at byte 44 (array 0): negative dimension -3 (dimension 1)"),
            (one(record(false, &[1 << 40, 1 << 40], (1, 0), 0, &[])), "at byte 24 (array 0): shape [1099511627776, 1099511627776] is too large"),
            (one(record(false, &[0, 1 << 40, 1 << 40], (1, 0), 0, &[])), "is too large"),
            (one(record(false, &[1 << 61], (1, 0), 1, &[])), "a float64 array of shape [2305843009213693952] is too large"),
            (one(record(false, &[1 << 30], (1, 0), 0, &[0; 8])), "at byte 56 (array 0): the file ends early: the data of a float32 array of shape [1073741824] needs 4294967296 bytes, 16 left"),
            (one(record(false, &[], (1, 0), 0, &[])), "at byte 32 (array 0): V2 record with ndim 0"),
            (one(record(true, &[-1], (1, 0), 0, &[])), "V3 record of unknown shape (dimension 0 is -1)"),
            (one(hex("00 00 00 00")), "at byte 24 (array 0): V0 record with ndim 0"),
            (one(hex("c9 fa 93 f9 00 00 00 00 ff ff ff 7f")), "at byte 32 (array 0): ndim 2147483647: at most 32 axes (the limit MAX_NDIM)"),
            (one(hex("c9 fa 93 f9 00 00 00 00 fe ff ff ff")), "negative ndim -2"),
            (one(hex("c9 fa 93 f9 01 00 00 00")), "at byte 28 (array 0): sparse storage (row_sparse/csr) is not supported (storage type 1)"),
            (one(hex("c9 fa 93 f9 02 00 00 00")), "sparse storage (row_sparse/csr) is not supported (storage type 2)"),
            (one(hex("c9 fa 93 f9 09 00 00 00")), "unknown storage type 9"),
            (file(&[record(false, &[1], (1, 0), 0, &f1(1.0))], &[b"\xff\xfe"]), "at byte 76 (name 0): the name is not valid UTF-8"),
            (hex("12 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00  ff ff ff ff ff ff ff ff"), "at byte 24 (array 0): the file ends early: the record magic"),
        ];
        for (bytes, want) in cases {
            let e = err(&bytes);
            assert!(
                e.starts_with("t.params: ") && e.contains(want),
                "{e}\n  wanted: {want}"
            );
        }
        // A name length beyond the file.
        let mut bytes = file(&[record(false, &[1], (1, 0), 0, &f1(1.0))], &[b"x"]);
        bytes[68..76].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = err(&bytes);
        assert!(e.contains("at byte 76 (name 0): the file ends early: the name needs 18446744073709551615 bytes, 1 left"), "{e}");
    }

    #[test]
    fn truncation_at_every_offset_is_an_error() {
        for text in [WORKED_EXAMPLE, LEGACY] {
            let bytes = hex(text);
            assert!(decode(&bytes, "ok").is_ok());
            for cut in 0..bytes.len() {
                let e = err(&bytes[..cut]);
                assert!(e.contains("the file ends early"), "cut at {cut}: {e}");
            }
        }
    }

    #[test]
    fn trailing_bytes_are_ignored_like_mxnet() {
        let mut bytes = hex(WORKED_EXAMPLE);
        bytes.extend_from_slice(b"junk");
        assert_eq!(dict(decode(&bytes, "t").unwrap()).len(), 2);
    }

    /// xorshift64: a deterministic stream of pseudo-random numbers without extra crates.
    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Ok or a Format error, never a panic or another error kind; Ok results re-encode.
    fn must_not_panic(bytes: &[u8]) -> bool {
        match decode(bytes, "fuzz") {
            Ok(l) => {
                let _ = encode(&l);
                true
            }
            Err(Error::Format { .. }) => false,
            Err(e) => panic!("unexpected error kind {e:?}"),
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let header = hex("12 01 00 00 00 00 00 00  00 00 00 00 00 00 00 00");
        let seeds = [hex(WORKED_EXAMPLE), hex(LEGACY)];
        let mut oks = 0;
        for round in 0..900 {
            let bytes: Vec<u8> = match round % 3 {
                // Pure noise.
                0 => (0..rng.below(200)).map(|_| rng.next() as u8).collect(),
                // A valid header and a small count, then noise (gets past the file magic).
                1 => {
                    let mut b = header.clone();
                    b.extend_from_slice(&(rng.below(4) as u64).to_le_bytes());
                    let recs = [V2_MAGIC, V3_MAGIC, V1_MAGIC, 2];
                    b.extend_from_slice(&recs[rng.below(4)].to_le_bytes());
                    b.extend((0..rng.below(120)).map(|_| {
                        if rng.below(3) == 0 {
                            rng.next() as u8
                        } else {
                            rng.below(3) as u8
                        }
                    }));
                    b
                }
                // A valid file with a few bytes changed.
                _ => {
                    let mut b = seeds[rng.below(2)].clone();
                    for _ in 0..1 + rng.below(4) {
                        let i = rng.below(b.len());
                        b[i] = rng.next() as u8;
                    }
                    b
                }
            };
            oks += usize::from(must_not_panic(&bytes));
        }
        // Some mutations only touch data bytes, so a share of inputs must still load.
        assert!(oks > 0);
    }
}
