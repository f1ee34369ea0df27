//! Seeded-mutation fuzzing of mxfn-core's file readers, on stable Rust (see README.md).
//!
//! Each parent test (`fuzz_<reader>`, `regressions`, `pending`) runs the work in a child
//! process — this test binary again, filtered to `fuzz_worker` — so that an abort (the
//! counting allocator refusing a request), a stack overflow or a hang fails the parent with
//! the input the child recorded, rather than killing the test binary.

pub mod alloc;
mod child;
mod mutate;
mod rng;
mod seeds;
mod target;

use rng::{fnv, Rng};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use target::{Finding, Kind, Reader};

pub use target::Reader as FuzzReader;

/// The seed of the default run (`MXFN_FUZZ_SEED` overrides; `random` picks one).
const DEFAULT_SEED: u64 = 0x6d78_666e_f022_0001;
/// Mutated inputs per reader in the default run (`MXFN_FUZZ_ITERS` overrides; a longer hunt
/// takes millions): all five readers together take about 30 s in the dev profile on 2 cores
/// without AVX-512 (300,000 took 80 s there, a tenth of the CI budget's slack).
const DEFAULT_ITERS: usize = 120_000;
/// The corpus grows with inputs giving a new result signature, up to this many entries…
const MAX_CORPUS: usize = 512;
/// …and at most this many per message template (the signature's first 48 characters), so
/// that input text echoed in messages (names, fields) cannot flood it.
const MAX_PER_TEMPLATE: usize = 8;

/// Scratch space under `target/` (`target/tmp/mxfn-fuzz`): the input each child is running,
/// its output, and found inputs (`findings/<reader>/`).
pub fn work_dir() -> PathBuf {
    let base = option_env!("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let d = base.join("mxfn-fuzz");
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The seed: `MXFN_FUZZ_SEED` (decimal, `0x` hex, or `random`), else the default.
fn resolve_seed() -> u64 {
    match std::env::var("MXFN_FUZZ_SEED") {
        Ok(s) if s == "random" => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            fnv(&t.as_nanos().to_le_bytes()) ^ u64::from(std::process::id())
        }
        Ok(s) => parse_u64(&s).unwrap_or_else(|| panic!("MXFN_FUZZ_SEED={s}: not a number")),
        Err(_) => DEFAULT_SEED,
    }
}

fn iters() -> usize {
    match std::env::var("MXFN_FUZZ_ITERS") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("MXFN_FUZZ_ITERS={s}: not a number")),
        Err(_) => DEFAULT_ITERS,
    }
}

fn pending_mode() -> bool {
    std::env::var("MXFN_FUZZ_PENDING").is_ok_and(|v| v == "1")
}

fn to_hex(b: &[u8], max: usize) -> String {
    let mut s = String::new();
    for (i, x) in b.iter().take(max).enumerate() {
        if i > 0 && i % 32 == 0 {
            s.push_str("\n      ");
        } else if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{x:02x}");
    }
    if b.len() > max {
        let _ = write!(s, " … ({} more bytes)", b.len() - max);
    }
    s
}

fn extension(reader: Reader) -> &'static str {
    match reader {
        Reader::SymbolJson => "json",
        Reader::Csv => "csv",
        _ => "bin",
    }
}

/// Saves a found input under `findings/<reader>/` and returns its path.
fn save_finding(reader: Reader, kind: &str, input: &[u8]) -> PathBuf {
    let dir = work_dir().join("findings").join(reader.name());
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let p = dir.join(format!("{kind}-{:016x}.{}", fnv(input), extension(reader)));
    std::fs::write(&p, input).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    p
}

/// The text of a finding report.
fn report(
    reader: Reader,
    symptom: &str,
    input: &[u8],
    original_len: usize,
    saved: &Path,
    origin: &str,
) -> String {
    let mut r = String::new();
    let _ = writeln!(
        r,
        "FUZZ FINDING in reader `{}` ({})",
        reader.name(),
        reader.api()
    );
    let _ = writeln!(r, "  symptom: {symptom}");
    let _ = writeln!(
        r,
        "  input:   {} bytes (minimised from {original_len}), saved as {}",
        input.len(),
        saved.display()
    );
    let _ = writeln!(r, "  hex:     {}", to_hex(input, 2048));
    if reader.is_text() {
        let text: String = String::from_utf8_lossy(input).chars().take(600).collect();
        let _ = writeln!(r, "  text:    {text:?}");
    }
    let _ = writeln!(r, "  origin:  {origin}");
    let _ = writeln!(
        r,
        "  keep it: copy the file to rust/core/tests/fuzz/pending/{}/ while the bug is open, \
         to regressions/{}/ once it is fixed (see tests/fuzz/README.md)",
        reader.name(),
        reader.name()
    );
    r
}

// -------------------------------------------------------------------------------------------
// Parent side: the tests
// -------------------------------------------------------------------------------------------

/// The test `fuzz_<reader>`: runs the mutation loop in a child and fails with the finding.
pub fn fuzz_test(reader: Reader) {
    let seed = resolve_seed();
    let iters = iters();
    let label = format!("fuzz-{}", reader.name());
    let mut env = vec![
        ("MXFN_FUZZ_WORKER", "fuzz".to_string()),
        ("MXFN_FUZZ_READER", reader.name().to_string()),
        ("MXFN_FUZZ_SEED", format!("0x{seed:x}")),
        ("MXFN_FUZZ_ITERS", iters.to_string()),
    ];
    if pending_mode() {
        env.push(("MXFN_FUZZ_PENDING", "1".into()));
    }
    let started = Instant::now();
    let out = child::run(&label, &env, child::input_timeout());
    let rerun = format!(
        "MXFN_FUZZ_SEED=0x{seed:x} MXFN_FUZZ_ITERS={iters} cargo test -p mxfn-core --test \
         fuzz_readers -- --exact fuzz_{}",
        reader.name()
    );
    match out.exit {
        child::Exit::Ok => {
            for l in out
                .stdout
                .lines()
                .filter_map(|l| l.find("[fuzz]").map(|i| &l[i..]))
            {
                println!("{l}");
            }
            println!(
                "[fuzz] {}: done in {:.1} s (seed 0x{seed:x})",
                reader.name(),
                started.elapsed().as_secs_f64()
            );
        }
        _ if out.report.is_some() => {
            panic!("{}  rerun:   {rerun}\n", out.report.unwrap_or_default());
        }
        _ => {
            let Some(input) = out.current.clone() else {
                panic!(
                    "the fuzz worker for {} failed before running any input: {}\n{}\n{}",
                    reader.name(),
                    out.symptom(),
                    out.stdout,
                    out.stderr_head()
                );
            };
            let class = out.crash_class();
            // The recorded input must crash a fresh child the same way; if it does not, the
            // crash happened outside the reader call (in the harness) or is not reproducible.
            let cand = work_dir().join(format!("{label}.candidate"));
            let crashes = |c: &[u8]| -> bool {
                if std::fs::write(&cand, c).is_err() {
                    return false;
                }
                let o = replay_child(reader, &cand, &format!("{label}-min"));
                o.crash_class().is_some() && o.crash_class() == class
            };
            if class != Some("hang") && !crashes(&input) {
                panic!(
                    "the fuzz worker for {} crashed ({}), but the input it was running does not \
                     crash on its own: a harness bug or a non-reproducible crash\n  input: {}\n  \
                     rerun: {rerun}\n  child stderr (first lines):\n{}\n",
                    reader.name(),
                    out.symptom(),
                    to_hex(&input, 512),
                    out.stderr_head()
                );
            }
            // Shrink through one replay child per candidate (a crash cannot be caught in
            // process); hangs are not shrunk, each try would take the whole timeout.
            let small = if class == Some("hang") {
                input.clone()
            } else {
                child::minimise(&input, 400, Duration::from_secs(90), crashes)
            };
            let saved = save_finding(reader, class.unwrap_or("crash"), &small);
            let origin = format!("seed 0x{seed:x}, a run of {iters} iterations");
            // The symptom of the minimised input (the same kind of crash, its own details).
            let last = replay_child(reader, &saved, &format!("{label}-min"));
            let last = if last.crash_class() == class {
                last
            } else {
                out
            };
            panic!(
                "{}  rerun:   {rerun}\n  child stderr (first lines):\n{}\n",
                report(
                    reader,
                    &last.symptom(),
                    &small,
                    input.len(),
                    &saved,
                    &origin
                ),
                last.stderr_head()
            );
        }
    }
}

fn replay_child(reader: Reader, file: &Path, label: &str) -> child::Outcome {
    let env = [
        ("MXFN_FUZZ_WORKER", "replay".to_string()),
        ("MXFN_FUZZ_READER", reader.name().to_string()),
        ("MXFN_FUZZ_INPUT", file.display().to_string()),
    ];
    child::run(label, &env, child::input_timeout())
}

/// The tests `regressions` and `pending`: every file of `tests/fuzz/<dir>/<reader>/` in its
/// own child; all must give Ok or Err without a panic, under the memory cap.
pub fn replay_test(dir: &str) {
    let root = target::fuzz_dir().join(dir);
    let mut failures = Vec::new();
    let mut n = 0;
    for reader in Reader::ALL {
        for file in target::input_files(&root, reader) {
            n += 1;
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let label = format!("{dir}-{}-{name}", reader.name());
            let out = replay_child(reader, &file, &label);
            let shown = format!("{dir}/{}/{name}", reader.name());
            match out.exit {
                child::Exit::Ok => {
                    let line = out
                        .stdout
                        .lines()
                        .find_map(|l| l.find("[fuzz]").map(|i| &l[i..]))
                        .unwrap_or("[fuzz] ok");
                    let moved = if dir == "pending" {
                        " — passes now: move it to regressions/"
                    } else {
                        ""
                    };
                    println!("{shown}: {}{moved}", line.trim_start_matches("[fuzz] "));
                }
                _ => {
                    let what = match &out.report {
                        Some(r) => r
                            .lines()
                            .find(|l| l.trim_start().starts_with("symptom:"))
                            .unwrap_or(r)
                            .trim()
                            .to_string(),
                        None => format!("symptom: {}", out.symptom()),
                    };
                    println!("{shown}: FAILS, {what}");
                    failures.push(format!("{shown}: {what}"));
                }
            }
        }
    }
    println!(
        "[fuzz] {dir}: {n} inputs replayed, {} failing",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {n} {dir} inputs fail:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

// -------------------------------------------------------------------------------------------
// Child side: the worker
// -------------------------------------------------------------------------------------------

/// The test `fuzz_worker`: does nothing unless started by a parent test (`MXFN_FUZZ_WORKER`).
pub fn worker() {
    let Ok(mode) = std::env::var("MXFN_FUZZ_WORKER") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"));
    let reader = Reader::from_name(&var("MXFN_FUZZ_READER"))
        .unwrap_or_else(|| panic!("unknown reader {}", var("MXFN_FUZZ_READER")));
    let label = var("MXFN_FUZZ_LABEL");
    let w = Worker {
        reader,
        current: work_dir().join(format!("{label}.current")),
        report_file: work_dir().join(format!("{label}.report")),
        scratch: std::env::temp_dir().join(format!(
            "mxfn-fuzz-{}-{}.{}",
            std::process::id(),
            reader.name(),
            extension(reader)
        )),
        pending: pending_mode(),
    };
    target::quiet_panics();
    let result = match mode.as_str() {
        "fuzz" => w.fuzz(),
        "replay" => w.replay(Path::new(&var("MXFN_FUZZ_INPUT"))),
        m => Err(format!("unknown MXFN_FUZZ_WORKER mode {m}")),
    };
    let _ = std::fs::remove_file(&w.scratch);
    if let Err(report) = result {
        let _ = std::panic::take_hook(); // the default hook again: the failure must show
        let _ = std::fs::write(&w.report_file, &report);
        panic!("{report}");
    }
}

struct Worker {
    reader: Reader,
    current: PathBuf,
    report_file: PathBuf,
    scratch: PathBuf,
    pending: bool,
}

impl Worker {
    /// Runs one input, recording it first (an abort then leaves it behind for the parent).
    fn exec(&self, input: &[u8]) -> target::Run {
        target::write_file(&self.current, input);
        target::run(self.reader, input, &self.scratch)
    }

    /// A smaller input failing the same way (in-process: panics and caps are caught here).
    fn minimise(&self, input: &[u8], kind: &Kind) -> Vec<u8> {
        child::minimise(input, 4000, Duration::from_secs(60), |c| {
            if !self.pending && target::known_pending(self.reader, c).is_some() {
                return false;
            }
            matches!(self.exec(c).result, Err(Finding { kind: ref k, .. }) if k == kind)
        })
    }

    fn finding(&self, input: &[u8], f: &Finding, origin: &str, shrink: bool) -> String {
        let small = if shrink {
            self.minimise(input, &f.kind)
        } else {
            input.to_vec()
        };
        // Describe the minimised input's own failure (same kind, perhaps other details).
        let what = match self.exec(&small).result {
            Err(g) if g.kind == f.kind => g.what,
            _ => f.what.clone(),
        };
        let kind = match f.kind {
            Kind::Panic => "panic",
            Kind::OverCap => "overcap",
            Kind::Check => "check",
        };
        let saved = save_finding(self.reader, kind, &small);
        report(self.reader, &what, &small, input.len(), &saved, origin)
    }

    fn replay(&self, path: &Path) -> Result<(), String> {
        let input = target::load_input(path)?;
        let r = self.exec(&input);
        match r.result {
            Ok(sig) => {
                println!(
                    "[fuzz] ok: {} bytes, peak {} KiB, {:.1} ms: {}",
                    input.len(),
                    r.peak >> 10,
                    r.time.as_secs_f64() * 1e3,
                    sig.chars().take(100).collect::<String>()
                );
                Ok(())
            }
            Err(f) => {
                Err(self.finding(&input, &f, &format!("replay of {}", path.display()), false))
            }
        }
    }

    fn fuzz(&self) -> Result<(), String> {
        let seed = std::env::var("MXFN_FUZZ_SEED")
            .ok()
            .and_then(|s| parse_u64(&s))
            .unwrap_or(DEFAULT_SEED);
        let iters = iters();
        let reader = self.reader;
        let mut rng = Rng::new(seed ^ fnv(reader.name().as_bytes()));
        let ops: Vec<&'static str> = mxfn_core::ops::registry().keys().copied().collect();
        let started = Instant::now();

        // The corpus: the seeds, then the regression inputs (not the generated ones).
        let mut corpus = seeds::seeds(reader);
        let n_seeds = corpus.len();
        let regressions = target::input_files(&target::fuzz_dir().join("regressions"), reader);
        for f in regressions {
            if f.extension().is_none_or(|e| e != "recipe") {
                if let Ok(b) = std::fs::read(&f) {
                    corpus.push(b);
                }
            }
        }
        let mut sigs: HashSet<String> = HashSet::new();
        let mut templates: HashMap<String, usize> = HashMap::new();
        let mut seeds_ok = 0;
        for (i, input) in corpus.clone().iter().enumerate() {
            let r = self.exec(input);
            match r.result {
                Ok(sig) => {
                    seeds_ok += usize::from(i < n_seeds && target::loaded(&sig));
                    sigs.insert(sig);
                }
                Err(f) => {
                    let origin = format!("corpus entry {i} (before any mutation)");
                    return Err(self.finding(input, &f, &origin, false));
                }
            }
        }
        let fixed = corpus.len();

        let (mut skipped, mut oks) = (0usize, 0usize);
        let (mut max_peak, mut max_peak_len) = (0usize, 0usize);
        let (mut slowest, mut slowest_len) = (Duration::ZERO, 0usize);
        for it in 0..iters {
            // Often the shorter of two random entries: small inputs run faster (and large ones
            // would dominate the run time), sometimes any entry.
            let (a, b) = (rng.below(corpus.len()), rng.below(corpus.len()));
            let shorter = corpus[a].len() <= corpus[b].len() || rng.chance(1, 4);
            let base = corpus[if shorter { a } else { b }].clone();
            let input = match reader {
                Reader::SymbolJson if rng.chance(2, 5) => mutate::json(&mut rng, &base, &ops)
                    .filter(|j| j.len() <= mutate::MAX_INPUT)
                    .unwrap_or_else(|| mutate::bytes(&mut rng, &base, &corpus)),
                Reader::SymbolJson | Reader::Csv if rng.chance(1, 5) => {
                    mutate::text_number(&mut rng, &base)
                }
                _ => mutate::bytes(&mut rng, &base, &corpus),
            };
            if !self.pending && target::known_pending(reader, &input).is_some() {
                skipped += 1;
                continue;
            }
            let r = self.exec(&input);
            if r.peak > max_peak {
                (max_peak, max_peak_len) = (r.peak, input.len());
            }
            if r.time > slowest {
                (slowest, slowest_len) = (r.time, input.len());
            }
            match r.result {
                Ok(sig) => {
                    oks += usize::from(target::loaded(&sig));
                    let template: String = sig.chars().take(48).collect();
                    let seen = templates.entry(template).or_insert(0);
                    if sigs.insert(sig) && *seen < MAX_PER_TEMPLATE {
                        *seen += 1;
                        if corpus.len() < MAX_CORPUS {
                            corpus.push(input);
                        } else {
                            let i = fixed + rng.below(MAX_CORPUS - fixed);
                            corpus[i] = input;
                        }
                    }
                }
                Err(f) => {
                    let origin = format!(
                        "seed 0x{seed:x}, iteration {it} of {iters} (MXFN_FUZZ_SEED=0x{seed:x} \
                         MXFN_FUZZ_ITERS={} replays it)",
                        it + 1
                    );
                    return Err(self.finding(&input, &f, &origin, true));
                }
            }
        }
        if std::env::var("MXFN_FUZZ_SIGS").is_ok_and(|v| v == "1") {
            // the result signatures seen, to see what the run reached
            let mut all: Vec<&String> = sigs.iter().collect();
            all.sort();
            let text: String = all.iter().map(|s| format!("{s}\n")).collect();
            let p = work_dir().join(format!("{}.sigs", reader.name()));
            let _ = std::fs::write(&p, text);
        }
        println!(
            "[fuzz] {}: {iters} inputs ({skipped} skipped as known pending bugs, {oks} loaded), \
             {} signatures, corpus {}, seeds {n_seeds} ({seeds_ok} load); peak {} KiB \
             ({max_peak_len}-byte input), slowest {:.1} ms ({slowest_len}-byte input); {:.1} s",
            reader.name(),
            sigs.len(),
            corpus.len(),
            max_peak >> 10,
            slowest.as_secs_f64() * 1e3,
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}
