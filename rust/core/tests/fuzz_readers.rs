//! Fuzzing of the file readers on stable Rust: seeded mutations of valid inputs go through
//! `.params`, symbol JSON, `.states`, IDX (MNIST) and CSV reading; every input must give Ok or
//! Err — no panic — and allocate at most `MEM_CAP` (a counting global allocator measures
//! each one). Regression inputs (`tests/fuzz/regressions/`) replay on every run, pending ones
//! (`tests/fuzz/pending/`, open bugs) with `MXFN_FUZZ_PENDING=1`. See tests/fuzz/README.md.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

mod fuzz;

use fuzz::FuzzReader as Reader;

#[global_allocator]
static ALLOC: fuzz::alloc::Counting = fuzz::alloc::Counting;

#[test]
fn fuzz_params() {
    fuzz::fuzz_test(Reader::Params);
}

#[test]
fn fuzz_symbol_json() {
    fuzz::fuzz_test(Reader::SymbolJson);
}

#[test]
fn fuzz_states() {
    fuzz::fuzz_test(Reader::States);
}

#[test]
fn fuzz_idx() {
    fuzz::fuzz_test(Reader::Idx);
}

#[test]
fn fuzz_csv() {
    fuzz::fuzz_test(Reader::Csv);
}

/// Every input of `tests/fuzz/regressions/` (each a bug found and fixed) loads without a
/// panic and under the memory cap.
#[test]
fn regressions() {
    fuzz::replay_test("regressions");
}

/// The inputs of open bugs (`tests/fuzz/pending/`): replayed only with `MXFN_FUZZ_PENDING=1`
/// (they fail until fixed; the owner then moves them to `regressions/`).
#[test]
fn pending() {
    if std::env::var("MXFN_FUZZ_PENDING").is_ok_and(|v| v == "1") {
        fuzz::replay_test("pending");
    } else {
        println!("[fuzz] pending inputs skipped (MXFN_FUZZ_PENDING=1 replays them)");
    }
}

/// The child process behind the tests above; a no-op when run on its own.
#[test]
fn fuzz_worker() {
    fuzz::worker();
}
