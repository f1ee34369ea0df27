//! The five readers under test, how one input runs (panic catching, memory cap, checks on
//! what comes back), and the generated inputs of `.recipe` regression files.

use super::alloc;
use super::seeds::{idx_file, record};
use flate2::write::GzEncoder;
use flate2::Compression;
use mxfn_core::error::Error;
use mxfn_core::io::csv::read_csv;
use mxfn_core::io::mnist::{read_idx_images, read_idx_labels};
use mxfn_core::symbol::json::{load_json, to_json};
use mxfn_core::tensor::{params_file, states_file};
use mxfn_core::{DType, NDArray};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most a reader may allocate (peak live bytes above what was live before the call) for
/// one input. Fuzz inputs are at most 256 KiB (`mutate::MAX_INPUT`); what a correct reader
/// needs is a small multiple of that: serde_json's `Value` tree for a symbol file (~20x), one
/// `f64` per CSV number (8x, doubled by `Vec` growth), the pickle reader's object arena, and
/// at worst deflate's 1032:1 for an IDX gzip of 64 KiB (~66 MiB, ~132 MiB with `Vec`
/// doubling). 256 MiB clears all of these and still catches a size or count taken from the
/// input and allocated unchecked (and a real MNIST train file inflates to 47 MB).
pub const MEM_CAP: usize = 256 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    Params,
    SymbolJson,
    States,
    Idx,
    Csv,
}

impl Reader {
    pub const ALL: [Reader; 5] = [
        Reader::Params,
        Reader::SymbolJson,
        Reader::States,
        Reader::Idx,
        Reader::Csv,
    ];

    /// The directory name under `regressions/` and `pending/`.
    pub fn name(self) -> &'static str {
        match self {
            Reader::Params => "params",
            Reader::SymbolJson => "symbol_json",
            Reader::States => "states",
            Reader::Idx => "idx",
            Reader::Csv => "csv",
        }
    }

    pub fn from_name(s: &str) -> Option<Reader> {
        Reader::ALL.into_iter().find(|r| r.name() == s)
    }

    /// What the input is given to.
    pub fn api(self) -> &'static str {
        match self {
            Reader::Params => "tensor::params_file::decode",
            Reader::SymbolJson => "symbol::json::load_json",
            Reader::States => "tensor::states_file::decode",
            Reader::Idx => "io::mnist::read_idx_images / read_idx_labels (from a file)",
            Reader::Csv => "io::csv::read_csv (from a file, widths 1 to 3)",
        }
    }

    pub fn is_text(self) -> bool {
        matches!(self, Reader::SymbolJson | Reader::Csv)
    }
}

/// What is wrong with how a reader handled an input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The reader panicked.
    Panic,
    /// The reader's peak allocation went over [`MEM_CAP`].
    OverCap,
    /// Ok or Err, but not what the reader promises (an Ok that does not re-encode to itself,
    /// an error of the wrong kind).
    Check,
}

#[derive(Clone, Debug)]
pub struct Finding {
    pub kind: Kind,
    pub what: String,
}

/// How an input went: its signature (`ok …` or the error text with numbers and quoted text
/// blanked, which the fuzzer uses as cheap coverage), the peak allocation and the time.
pub struct Run {
    pub result: Result<String, Finding>,
    pub peak: usize,
    pub time: Duration,
}

/// The last panic's message and place, kept by the quiet panic hook of a worker.
pub static LAST_PANIC: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Replaces the panic hook with one that records the message instead of printing it
/// (a caught panic is reported with its input; a thousand stack traces help nobody).
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(non-string payload)".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        if let Ok(mut p) = LAST_PANIC.lock() {
            *p = format!("{msg}{at}");
        }
    }));
}

/// Runs one input through `reader`. `scratch` is the temporary file path the file readers
/// read from.
pub fn run(reader: Reader, input: &[u8], scratch: &Path) -> Run {
    if matches!(reader, Reader::Idx | Reader::Csv) {
        write_file(scratch, input);
    }
    let start = Instant::now();
    alloc::reset_peak();
    let base = alloc::current();
    let r = catch_unwind(AssertUnwindSafe(|| call(reader, input, scratch)));
    let peak = alloc::peak().saturating_sub(base);
    let time = start.elapsed();
    let result = match r {
        Err(_) => {
            let msg = LAST_PANIC.lock().map(|p| p.clone()).unwrap_or_default();
            Err(Finding {
                kind: Kind::Panic,
                what: format!("panicked: {msg}"),
            })
        }
        Ok(_) if peak > MEM_CAP => Err(Finding {
            kind: Kind::OverCap,
            what: format!(
                "allocated {} MiB at its peak for a {}-byte input (cap {} MiB)",
                peak >> 20,
                input.len(),
                MEM_CAP >> 20
            ),
        }),
        Ok(Err(what)) => Err(Finding {
            kind: Kind::Check,
            what,
        }),
        Ok(Ok(sig)) => Ok(sig),
    };
    Run { result, peak, time }
}

/// Overwrites `path` with `bytes` in place. (Not `fs::write`: truncating a file to 0 and
/// rewriting it makes ext4 flush it on close, ~2 ms a time, which would dominate the run.)
pub fn write_file(path: &Path, bytes: &[u8]) {
    let r = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.set_len(bytes.len() as u64)
        });
    if let Err(e) = r {
        panic!("cannot write {}: {e}", path.display());
    }
}

/// Whether a signature is that of a successful load (of at least one call, for IDX / CSV).
pub fn loaded(sig: &str) -> bool {
    sig.split(" | ").any(|p| p.starts_with("ok"))
}

/// The error text as a signature: numbers (decimal or `0x` hex) blanked and the content of
/// quotes and brackets elided, the scratch path dropped, so that it names the check that
/// failed rather than the input (node names, CSV fields, shapes would make every input new).
fn sig(e: &Error, scratch: &Path) -> String {
    let mut text = e.to_string().replace(&scratch.display().to_string(), "");
    // Content that runs to the end of the message: a pickle's global, a CSV field (which
    // may hold quotes itself).
    for marker in ["the pickle references ", ": \""] {
        if let Some(i) = text.find(marker) {
            if marker != ": \"" || text.ends_with("is not a number") {
                text.truncate(i + marker.len());
            }
        }
    }
    let mut out = String::new();
    let mut token = String::new();
    let (mut depth, mut quoted) = (0usize, false);
    let flush = |token: &mut String, out: &mut String| {
        let t = token.as_str();
        let number = t.chars().all(|c| c.is_ascii_digit())
            || t.strip_prefix("0x")
                .is_some_and(|h| h.chars().all(|c| c.is_ascii_hexdigit()));
        out.push_str(if number && !t.is_empty() { "#" } else { t });
        token.clear();
    };
    for c in text.chars() {
        if out.len() >= 160 {
            break;
        }
        if quoted {
            if c == '"' {
                quoted = false;
                out.push('"');
            }
            continue;
        }
        match c {
            '(' | '[' | '{' => {
                if depth == 0 {
                    flush(&mut token, &mut out);
                    out.push(c);
                    out.push('…');
                }
                depth += 1;
            }
            ')' | ']' | '}' => {
                // an unbalanced closer (from the input's own text) is dropped
                if depth > 0 {
                    depth -= 1;
                    if depth == 0 {
                        out.push(c);
                    }
                }
            }
            _ if depth > 0 => {}
            '"' => {
                flush(&mut token, &mut out);
                quoted = true;
                out.push_str("\"…");
            }
            c if c.is_ascii_alphanumeric() || c == '_' => token.push(c),
            c if c.is_ascii_graphic() && c != '\\' || c == ' ' => {
                flush(&mut token, &mut out);
                out.push(c);
            }
            _ => flush(&mut token, &mut out),
        }
    }
    flush(&mut token, &mut out);
    out
}

/// Calls the reader. Ok(signature) when it behaved (returned Ok or Err), Err(message) when
/// a check on its result failed. A panic unwinds out of here.
fn call(reader: Reader, input: &[u8], scratch: &Path) -> Result<String, String> {
    match reader {
        Reader::Params => match params_file::decode(input, "fuzz.params") {
            Ok(list) => {
                // Decoded files re-encode to a canonical form that decodes to itself.
                let e1 = params_file::encode(&list);
                let back = params_file::decode(&e1, "re-encoded")
                    .map_err(|e| format!("decoded, but its re-encoding fails to load: {e}"))?;
                if params_file::encode(&back) != e1 {
                    return Err("decoded, but re-encoding is not stable".into());
                }
                Ok(match list {
                    params_file::NdList::List(l) => format!("ok list {}", l.len().min(3)),
                    params_file::NdList::Dict(d) => format!("ok dict {}", d.len().min(3)),
                })
            }
            Err(e @ Error::Format { .. }) => Ok(sig(&e, scratch)),
            Err(e) => Err(format!("an error that is not Error::Format: {e:?}")),
        },
        Reader::States => match states_file::decode(input, "fuzz.states") {
            Ok(st) => {
                let e1 = states_file::encode(&st);
                let back = states_file::decode(&e1, "re-encoded")
                    .map_err(|e| format!("decoded, but its re-encoding fails to load: {e}"))?;
                if states_file::encode(&back) != e1 {
                    return Err("decoded, but re-encoding is not stable".into());
                }
                Ok(format!("ok {}", st.len().min(3)))
            }
            Err(e @ Error::Format { .. }) => Ok(sig(&e, scratch)),
            Err(e) => Err(format!("an error that is not Error::Format: {e:?}")),
        },
        Reader::SymbolJson => {
            let text = String::from_utf8_lossy(input);
            match load_json(&text) {
                Ok(sym) => {
                    let _ = to_json(&sym);
                    Ok(format!("ok {}", sym.list_outputs().len().min(3)))
                }
                Err(e) => Ok(sig(&e, scratch)),
            }
        }
        Reader::Idx => {
            let a = match read_idx_images(scratch) {
                Ok(im) => {
                    if im.pixels.len() != im.count * im.rows * im.cols {
                        return Err(format!(
                            "images: {} pixels for {}x{}x{}",
                            im.pixels.len(),
                            im.count,
                            im.rows,
                            im.cols
                        ));
                    }
                    "ok".to_string()
                }
                Err(e) => sig(&e, scratch),
            };
            let b = match read_idx_labels(scratch) {
                Ok(_) => "ok".to_string(),
                Err(e) => sig(&e, scratch),
            };
            Ok(format!("{a} | {b}"))
        }
        Reader::Csv => {
            let mut s = String::new();
            for width in 1..=3 {
                match read_csv(scratch, width) {
                    Ok((rows, values)) => {
                        if values.len() != rows * width {
                            return Err(format!(
                                "width {width}: {} values for {rows} rows",
                                values.len()
                            ));
                        }
                        s.push_str("ok | ");
                    }
                    Err(e) => {
                        s.push_str(&sig(&e, scratch));
                        s.push_str(" | ");
                    }
                }
            }
            Ok(s)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Known, not yet fixed bugs
// ---------------------------------------------------------------------------------------------

/// Names the open bug an input hits, for the bugs the default run must skip: each is filed
/// under `pending/`, and without the skip the fuzzer finds it again within seconds.
/// `MXFN_FUZZ_PENDING=1` turns the skipping off. Add a rule (a cheap scan of the input) when a
/// finding is filed as pending; remove it when the bug is fixed.
pub fn known_pending(_reader: Reader, _input: &[u8]) -> Option<&'static str> {
    // No open bug: every finding so far is fixed and replayed from regressions/.
    None
}

// ---------------------------------------------------------------------------------------------
// Regression files
// ---------------------------------------------------------------------------------------------

/// The input of a regression file: its bytes, or for a `.recipe` file the input its one
/// directive generates (inputs too big to keep in the repository).
///
/// Directives (`#` starts a comment):
/// - `idx-gzip <zero bytes> <magic> <size>...`: an IDX header with this magic and these sizes,
///   then that many zero bytes (as many as the sizes announce, or not), gzipped in 16 MiB
///   members (a 2 GiB payload costs 2 MB and a second to make);
/// - `states-repeat <array bytes> <count> build|ref`: a `.states` pickle whose first state is
///   a float32 array of that many bytes, followed by `count` more states that either BUILD a
///   new NDArray from the same memoized bytearray (`build`) or reference the first NDArray
///   (`ref`).
pub fn load_input(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if path.extension().is_none_or(|e| e != "recipe") {
        return Ok(bytes);
    }
    let text = String::from_utf8_lossy(&bytes);
    let line = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .find(|l| !l.is_empty())
        .ok_or_else(|| format!("{}: no directive", path.display()))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| -> Result<u64, String> {
        words
            .get(i)
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| format!("{}: `{line}`: word {i} is not a number", path.display()))
    };
    match words.first().copied() {
        Some("idx-gzip") => {
            let (zeros, magic) = (num(1)?, num(2)? as u32);
            let dims: Vec<u32> = (3..words.len())
                .map(|i| num(i).map(|d| d as u32))
                .collect::<Result<_, _>>()?;
            Ok(idx_gzip_zeros(magic, &dims, zeros))
        }
        Some("states-repeat") => {
            let (size, count) = (num(1)? as usize, num(2)? as usize);
            let build = match words.get(3).copied() {
                Some("build") => true,
                Some("ref") => false,
                _ => return Err(format!("{}: `{line}`: build or ref", path.display())),
            };
            Ok(states_repeat(size, count, build))
        }
        _ => Err(format!("{}: unknown directive `{line}`", path.display())),
    }
}

fn gzip_member(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::best());
    e.write_all(bytes).unwrap_or_default();
    e.finish().unwrap_or_default()
}

fn idx_gzip_zeros(magic: u32, dims: &[u32], total: u64) -> Vec<u8> {
    const MEMBER: u64 = 16 << 20;
    let mut out = gzip_member(&idx_file(magic, dims, &[]));
    let full = gzip_member(&vec![0u8; MEMBER.min(total) as usize]);
    for _ in 0..total / MEMBER {
        out.extend_from_slice(&full);
    }
    if !total.is_multiple_of(MEMBER) {
        out.extend(gzip_member(&vec![0u8; (total % MEMBER) as usize]));
    }
    out
}

/// A pickle builder that numbers its MEMOIZEs.
struct Pickle {
    out: Vec<u8>,
    memo: u32,
}

impl Pickle {
    fn memoize(&mut self) -> u32 {
        self.out.push(0x94);
        self.memo += 1;
        self.memo - 1
    }
    fn get(&mut self, i: u32) {
        self.out.push(b'j');
        self.out.extend(i.to_le_bytes());
    }
    fn short_str(&mut self, s: &str) {
        self.out.extend([0x8c, s.len() as u8]);
        self.out.extend(s.as_bytes());
    }
}

fn states_repeat(size: usize, count: usize, build: bool) -> Vec<u8> {
    let rec = record(&NDArray::zeros(&[size / 4], DType::Float32));
    let mut p = Pickle {
        out: vec![0x80, 4, b'}'],
        memo: 0,
    };
    p.memoize();
    p.out.extend([b'(', b'K', 0]);
    p.short_str("mxnet.ndarray.ndarray");
    p.memoize();
    p.short_str("NDArray");
    p.memoize();
    p.out.push(0x93);
    let class = p.memoize();
    p.out.extend([b'N', 0x85]);
    let args = p.memoize();
    p.out.push(b'R');
    let nd = p.memoize();
    p.out.push(b'}');
    p.memoize();
    p.short_str("handle");
    let handle = p.memoize();
    p.short_str("builtins");
    p.memoize();
    p.short_str("bytearray");
    p.memoize();
    p.out.push(0x93);
    p.memoize();
    p.out.push(0x8e); // BINBYTES8
    p.out.extend((rec.len() as u64).to_le_bytes());
    p.out.extend(&rec);
    p.memoize();
    p.out.push(0x85);
    p.memoize();
    p.out.push(b'R');
    let bytearray = p.memoize();
    p.out.extend([b's', b'b']);
    for k in 1..=count as u32 {
        p.out.push(b'J');
        p.out.extend(k.to_le_bytes());
        if build {
            p.get(class);
            p.get(args);
            p.out.extend([b'R', b'}']);
            p.get(handle);
            p.get(bytearray);
            p.out.extend([b's', b'b']);
        } else {
            p.get(nd);
        }
    }
    p.out.extend([b'u', b'.']);
    p.out
}

/// Where the regression and pending inputs live.
pub fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz")
}

/// The input files of `<dir>/<reader>/`, sorted (files starting with `.` and `README*` skipped).
pub fn input_files(dir: &Path, reader: Reader) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir.join(reader.name())) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            !n.starts_with('.') && !n.starts_with("README")
        })
        .collect();
    files.sort();
    files
}
