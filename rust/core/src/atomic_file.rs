//! The one way mxfn writes a file: atomically, never through a planted link, keeping the mode.
//!
//! Every file mxfn writes (`.params`, `.states`, `-symbol.json`) goes through [`write`]:
//!
//! 1. the bytes go to a new temporary file in the target's directory, named
//!    `.<name>.tmp.<pid>.<n>.<nanos>` and opened with `create_new` (`O_CREAT | O_EXCL`), which
//!    refuses to open any existing path — a symlink planted at the name included, so nothing
//!    outside the directory entry mxfn itself creates is ever written (the effect of
//!    `O_NOFOLLOW`, without needing it);
//! 2. the temporary file takes the permission bits of the file it replaces (a `0600` file stays
//!    `0600`), or the process default for a new file;
//! 3. it is flushed to disk (`fsync`) and renamed over the target, which readers see either
//!    whole or not at all — two threads or processes saving one path each rename a complete
//!    file, the last one wins;
//! 4. the directory is synced so the rename itself survives a crash (best effort: not every
//!    platform can sync a directory).
//!
//! On failure the temporary file is removed and the error names the target. A writer killed
//! between steps 1 and 3 leaves its temporary file behind; the next write to the same target
//! removes temporary files of writers that are no longer running (on Linux, whose `/proc`
//! says so) or, elsewhere, that are older than a day.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// How old a temporary file must be before a writer on a platform without `/proc` treats it
/// as left by a dead writer: far longer than any save takes.
const STALE_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// How many unique names to try before giving up (a name is only taken if another writer or
/// an attacker created it first).
const NAME_ATTEMPTS: u32 = 16;

/// Writes `bytes` to `path` atomically (see the module documentation). An [`Error::Io`] names
/// `path`; a path with no file name is an [`Error::InvalidArgument`].
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let io_err = |source: std::io::Error| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let name = path.file_name().ok_or_else(|| {
        Error::invalid(
            "path",
            "a path naming a file",
            format!("\"{}\"", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let prefix = format!(".{}.tmp.", name.to_string_lossy());
    remove_stale_temps(&dir, &prefix);
    // The mode of the file being replaced (following a link, as the rename replaces what the
    // user sees at `path`); none for a new file.
    let mode = fs::metadata(path).ok().map(|m| m.permissions());
    let (tmp, file) = create_temp(&dir, &prefix).map_err(io_err)?;
    if let Err(e) = fill_and_rename(file, &tmp, bytes, mode, path) {
        // The rename did not happen: the temporary file is ours to remove.
        let _ = fs::remove_file(&tmp);
        return Err(io_err(e));
    }
    #[cfg(unix)]
    if let Ok(d) = fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Creates a new, uniquely named temporary file in `dir` (never opening an existing path).
fn create_temp(dir: &Path, prefix: &str) -> std::io::Result<(PathBuf, fs::File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut last = None;
    for _ in 0..NAME_ATTEMPTS {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tmp = dir.join(format!(
            "{prefix}{}.{}.{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no unique temporary name")))
}

/// Writes, sets the mode, syncs and renames the temporary file over `target`.
fn fill_and_rename(
    mut file: fs::File,
    tmp: &Path,
    bytes: &[u8],
    mode: Option<fs::Permissions>,
    target: &Path,
) -> std::io::Result<()> {
    file.write_all(bytes)?;
    if let Some(mode) = mode {
        file.set_permissions(mode)?;
    }
    file.sync_all()?;
    drop(file);
    fs::rename(tmp, target)
}

/// Removes `dir`'s temporary files for this target (names starting with `prefix`) whose writer
/// is gone. Best effort: a file that cannot be inspected or removed is left alone.
fn remove_stale_temps(dir: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && writer_is_gone(pid, &entry) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether the writer `pid` of the temporary file `entry` has stopped running.
fn writer_is_gone(pid: u32, entry: &fs::DirEntry) -> bool {
    let proc_root = Path::new("/proc/self");
    if cfg!(target_os = "linux") && proc_root.exists() {
        return !Path::new("/proc").join(pid.to_string()).exists();
    }
    entry
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > STALE_AFTER)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mxfn-atomic-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn temps_in(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect()
    }

    #[test]
    fn writes_replaces_and_leaves_no_temp() {
        let dir = scratch("basic");
        let path = dir.join("a.bin");
        write(&path, b"one").unwrap();
        write(&path, b"two!").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two!");
        assert!(temps_in(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_at_the_temp_name_is_never_followed() {
        use std::os::unix::fs::symlink;
        let dir = scratch("link");
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").unwrap();
        let path = dir.join("model.json");
        // Plant links at every name the next writes could pick from this process's prefix:
        // the name is unpredictable, but a link at any name must not be followed.
        let prefix = format!(".model.json.tmp.{}.", std::process::id());
        for n in 0..64 {
            let _ = symlink(&victim, dir.join(format!("{prefix}{n}")));
        }
        write(&path, b"{}").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&path).unwrap(), b"{}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn keeps_the_mode_of_the_file_it_replaces() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("mode");
        let path = dir.join("secret.params");
        fs::write(&path, b"old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        write(&path, b"new").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn concurrent_writers_of_one_path_each_land_a_whole_file() {
        let dir = scratch("threads");
        let path = dir.join("shared.json");
        let payloads: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 4096]).collect();
        std::thread::scope(|s| {
            for p in &payloads {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..20 {
                        write(path, p).unwrap();
                        let got = fs::read(path).unwrap();
                        assert!(payloads_contains(&got), "torn read");
                    }
                });
            }
        });
        fn payloads_contains(got: &[u8]) -> bool {
            got.len() == 4096 && got.iter().all(|&b| b == got[0])
        }
        assert!(temps_in(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn removes_temp_files_of_dead_writers_only() {
        let dir = scratch("stale");
        let path = dir.join("m.params");
        // pid 0 never names a user process; our own pid is alive.
        let dead = dir.join(".m.params.tmp.0.0.0");
        let alive = dir.join(format!(".m.params.tmp.{}.999.0", std::process::id()));
        let other = dir.join(".other.tmp.0.0.0");
        for p in [&dead, &alive, &other] {
            fs::write(p, b"partial").unwrap();
        }
        write(&path, b"x").unwrap();
        assert!(!dead.exists());
        assert!(alive.exists());
        assert!(other.exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_path_without_a_file_name_is_an_invalid_argument() {
        let err = write(Path::new("/"), b"x").unwrap_err();
        assert!(err.to_string().contains("path"), "{err}");
    }
}
