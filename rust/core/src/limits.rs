//! The limits policy: how big an input may make mxfn's allocations, checked before allocating.
//!
//! A tiny input must not be able to make mxfn allocate gigabytes, and an allocation that cannot
//! succeed must raise an error instead of aborting the process. Every size that comes from an
//! input — a shape in a file or a call, a batch size, a variadic operator's input count, a
//! file's declared length — is checked here, before anything is allocated:
//!
//! | limit | value | applies to | raise it with |
//! |---|---|---|---|
//! | [`MAX_NDIM`] | 32 axes | every array made or loaded (numpy's limit) | — |
//! | [`max_bytes`] | the machine's memory | one array; one batch of an iterator; one file read whole or inflated; the bytes a `.states` file references | `MXFN_MAX_BYTES` (bytes, read at first use) |
//! | [`max_bytes`] | same | the sum of the arrays one bind allocates (arguments, auxiliary states, outputs) | same |
//! | [`MAX_NUM_ARGS`] | 65,536 | the input count of a variadic operator (`Concat`, `add_n`, `stack`, …) and `SliceChannel`'s `num_outputs`, declared as `ParamKind::Count` (checked when the node is parsed) | — |
//!
//! An array larger than the machine's memory can never be used, so the default refuses only
//! what cannot work; set `MXFN_MAX_BYTES` lower to bound a service's memory, or higher on a
//! machine with more swap than RAM. A batch size larger than the data is allowed, as in MXNet
//! (the iterator pads by wrapping around); it is bounded by the bytes of one batch.
//!
//! Each error is an [`Error::Invalid`] naming the argument, the limit with its value and the
//! way to raise it, and the size that was asked for.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The most axes an array may have (numpy's `NPY_MAXDIMS`; MXNet's own limit is the same).
pub const MAX_NDIM: usize = 32;

/// The most inputs a variadic operator (`num_args`) may take, and outputs `SliceChannel`. MXNet sets no bound; this one is
/// far above any real graph and keeps a symbol file's `num_args` from sizing huge tables.
pub const MAX_NUM_ARGS: usize = 1 << 16;

/// The environment variable that overrides [`max_bytes`].
pub const MAX_BYTES_ENV: &str = "MXFN_MAX_BYTES";

/// The most bytes one array, batch, file or bind may take: `MXFN_MAX_BYTES` if set to a
/// number when first asked, else the machine's physical memory (else `isize::MAX` where that
/// is unknown). Read once: the check sits on every operator call.
pub fn max_bytes() -> u64 {
    static MAX: OnceLock<u64> = OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var(MAX_BYTES_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(machine_memory)
            .min(isize::MAX as u64)
    })
}

/// The machine's physical memory in bytes.
fn machine_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .unwrap_or(isize::MAX as u64)
}

/// The error for a size above [`max_bytes`].
fn too_many_bytes(what: &str, got: String) -> Error {
    Error::invalid(
        what,
        format!(
            "at most {} bytes (the limit {MAX_BYTES_ENV}; default: the machine's memory; \
             set {MAX_BYTES_ENV} to raise it)",
            max_bytes()
        ),
        got,
    )
}

/// Checks `bytes` against [`max_bytes`]; `what` names the argument, `desc` how the count came
/// about (shown with it).
pub fn check_bytes(what: &str, bytes: u64, desc: &str) -> Result<()> {
    if bytes > max_bytes() {
        let sep = if desc.is_empty() { "" } else { ": " };
        return Err(too_many_bytes(what, format!("{bytes} bytes{sep}{desc}")));
    }
    Ok(())
}

/// The byte size of an array of `shape` with `elem_size`-byte elements, checked against
/// [`MAX_NDIM`] and [`max_bytes`]. The strides must fit an `isize` too, counting zero-length
/// axes as 1 as ndarray and numpy do, so a `(0, 2**62)` shape is refused although it holds
/// no bytes (its strides would overflow); `(0, 2**40)` is fine.
pub fn array_bytes(what: &str, shape: &[usize], elem_size: usize) -> Result<u64> {
    if shape.len() > MAX_NDIM {
        return Err(Error::invalid(
            what,
            format!("at most {MAX_NDIM} axes (the limit MAX_NDIM, as numpy's)"),
            format!("{} axes", shape.len()),
        ));
    }
    let desc = || format!("shape {shape:?} of {elem_size}-byte values");
    let stride_span = shape
        .iter()
        .try_fold(elem_size as u64, |b, &n| b.checked_mul(n.max(1) as u64))
        .filter(|&b| b <= isize::MAX as u64);
    if stride_span.is_none() {
        return Err(Error::invalid(
            what,
            format!(
                "axes whose sizes (zero-length ones counted as 1) multiply to at most {} bytes",
                isize::MAX
            ),
            format!("more: {} (its byte strides would overflow)", desc()),
        ));
    }
    // No overflow: the product with zero-length axes is at most the one without.
    let bytes = shape.iter().fold(elem_size as u64, |b, &n| b * n as u64);
    if bytes > max_bytes() {
        return Err(too_many_bytes(what, format!("{bytes} bytes: {}", desc())));
    }
    Ok(bytes)
}

/// Reads the file at `path` whole, after checking its size against [`max_bytes`]. An
/// unreadable file is an [`Error::Io`] naming `path`.
pub fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    let io_err = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io_err)?.len();
    check_bytes(&format!("file \"{}\"", path.display()), len, "its size")?;
    std::fs::read(path).map_err(io_err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shapes_within_the_limits_pass_and_report_their_bytes() {
        assert_eq!(array_bytes("a", &[2, 3], 4).unwrap(), 24);
        assert_eq!(array_bytes("a", &[0, 5], 8).unwrap(), 0);
        assert_eq!(array_bytes("a", &[0, 1 << 40], 4).unwrap(), 0);
        assert_eq!(array_bytes("a", &[], 4).unwrap(), 4);
    }

    #[test]
    fn too_many_axes_or_bytes_name_the_argument_and_the_limit() {
        let e = array_bytes("nd.zeros: shape", &[1; 33], 4).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("nd.zeros: shape") && text.contains("MAX_NDIM"),
            "{text}"
        );
        let e = array_bytes("nd.zeros: shape", &[1_000_000_000_000, 784], 4).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(MAX_BYTES_ENV) && text.contains("3136000000000000"),
            "{text}"
        );
        let e = array_bytes("x", &[0, 1 << 61, 16], 8).unwrap_err();
        assert!(e.to_string().contains("strides would overflow"), "{e}");
    }

    #[test]
    fn the_default_byte_limit_is_the_machine_memory() {
        if std::env::var(MAX_BYTES_ENV).is_err() {
            assert_eq!(max_bytes(), machine_memory().min(isize::MAX as u64));
            assert!(max_bytes() > 1 << 20);
        }
    }
}
