//! Running a worker in a child process (the test binary itself, filtered to `fuzz_worker`):
//! an abort (a refused allocation), a stack overflow or a hang then fails the parent test
//! with the input the child recorded, instead of killing the test binary.

use super::work_dir;
use std::fs;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

pub enum Exit {
    Ok,
    /// The worker failed a test: it found something and wrote a report.
    Failed(ExitStatus),
    /// Killed by a signal or exited oddly (an abort, a stack overflow).
    Crashed(ExitStatus),
    /// One input ran longer than the per-input timeout; the child was killed.
    TimedOut(Duration),
}

pub struct Outcome {
    pub exit: Exit,
    pub stdout: String,
    pub stderr: String,
    /// The input the child was running last (its `.current` file).
    pub current: Option<Vec<u8>>,
    /// The child's report of a finding it handled itself.
    pub report: Option<String>,
}

impl Outcome {
    /// What the crash looked like, from the child's stderr.
    pub fn symptom(&self) -> String {
        let line = |pat: &str| {
            self.stderr
                .lines()
                .find(|l| l.contains(pat))
                .map(str::trim)
                .map(str::to_string)
        };
        match &self.exit {
            Exit::Ok => "no failure".into(),
            Exit::TimedOut(t) => format!(
                "hang: one input ran more than {} s (MXFN_FUZZ_TIMEOUT), the child was killed",
                t.as_secs()
            ),
            Exit::Failed(s) | Exit::Crashed(s) => {
                if let Some(l) = line("memory allocation of") {
                    format!(
                        "allocation refused by the fuzz allocator's hard limit ({l}); the process \
                         aborted ({s})"
                    )
                } else if let Some(l) = line("overflowed its stack") {
                    format!("stack overflow ({l}; {s})")
                } else {
                    format!("the process died ({s})")
                }
            }
        }
    }

    /// The category of a crash, to tell whether a smaller input still fails the same way.
    pub fn crash_class(&self) -> Option<&'static str> {
        match &self.exit {
            Exit::Ok | Exit::Failed(_) => None,
            Exit::TimedOut(_) => Some("hang"),
            Exit::Crashed(_) if self.stderr.contains("memory allocation of") => Some("alloc"),
            Exit::Crashed(_) if self.stderr.contains("overflowed its stack") => Some("stack"),
            Exit::Crashed(_) => Some("crash"),
        }
    }

    /// The first lines of the child's stderr (the message and the top of a backtrace).
    pub fn stderr_head(&self) -> String {
        let lines: Vec<&str> = self.stderr.lines().take(40).collect();
        lines.join("\n")
    }
}

/// The per-input timeout (`MXFN_FUZZ_TIMEOUT` seconds, default 60).
pub fn input_timeout() -> Duration {
    let secs = std::env::var("MXFN_FUZZ_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

/// Runs the `fuzz_worker` test of this binary with `env` set, its output in
/// `<work>/<label>.{out,err}`, and waits; the child is killed when the same input has been
/// running for longer than `timeout` (judged by its `.current` file's modification time).
pub fn run(label: &str, env: &[(&str, String)], timeout: Duration) -> Outcome {
    let dir = work_dir();
    let path = |ext: &str| -> PathBuf { dir.join(format!("{label}.{ext}")) };
    for ext in ["current", "report", "out", "err"] {
        let _ = fs::remove_file(path(ext));
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let args = [
        "fuzz_worker",
        "--exact",
        "--nocapture",
        "--test-threads",
        "1",
    ];
    // No core dumps from an aborting child (`ulimit -c 0` through sh where there is one).
    let mut cmd = if cfg!(unix) && std::path::Path::new("/bin/sh").exists() {
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg("ulimit -c 0 2>/dev/null; exec \"$0\" \"$@\"")
            .arg(&exe)
            .args(args);
        c
    } else {
        let mut c = Command::new(&exe);
        c.args(args);
        c
    };
    cmd.current_dir(&dir)
        .env("MXFN_FUZZ_LABEL", label)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(fs::File::create(path("out")).unwrap_or_else(|e| panic!("{label}.out: {e}")))
        .stderr(fs::File::create(path("err")).unwrap_or_else(|e| panic!("{label}.err: {e}")));
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the fuzz worker {}: {e}", exe.display()));
    // The last sign of progress: the spawn, then each new input (the `.current` file's
    // modification time; a file that vanished keeps the last time seen).
    let mut progress = SystemTime::now();
    let exit = loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break Exit::Ok,
            Ok(Some(status)) if status.code() == Some(101) => break Exit::Failed(status),
            Ok(Some(status)) => break Exit::Crashed(status),
            Ok(None) => {}
            Err(e) => panic!("waiting for the fuzz worker: {e}"),
        }
        if let Ok(t) = fs::metadata(path("current")).and_then(|m| m.modified()) {
            progress = progress.max(t);
        }
        if SystemTime::now()
            .duration_since(progress)
            .unwrap_or_default()
            > timeout
        {
            let _ = child.kill();
            let _ = child.wait();
            break Exit::TimedOut(timeout);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |ext: &str| fs::read_to_string(path(ext)).ok();
    Outcome {
        exit,
        stdout: read("out").unwrap_or_default(),
        stderr: read("err").unwrap_or_default(),
        current: fs::read(path("current")).ok(),
        report: read("report"),
    }
}

/// Shrinks `input` while `still_fails` holds, within `max_runs` calls and `budget` time: for
/// JSON, first by its structure (members and elements removed), then by deleting chunks of
/// halving sizes (a simple ddmin).
pub fn minimise(
    input: &[u8],
    max_runs: usize,
    budget: Duration,
    mut still_fails: impl FnMut(&[u8]) -> bool,
) -> Vec<u8> {
    let deadline = Instant::now() + budget;
    let mut cur = input.to_vec();
    let mut runs = 0;
    'structure: loop {
        for cand in super::mutate::json_shrinks(&cur) {
            if runs >= max_runs || Instant::now() > deadline {
                return cur;
            }
            runs += 1;
            if still_fails(&cand) {
                cur = cand;
                continue 'structure;
            }
        }
        break;
    }
    let mut chunk = (cur.len() / 2).max(1);
    loop {
        let mut i = 0;
        let mut progress = false;
        while i < cur.len() {
            if runs >= max_runs || Instant::now() > deadline {
                return cur;
            }
            let end = (i + chunk).min(cur.len());
            let mut cand = cur[..i].to_vec();
            cand.extend_from_slice(&cur[end..]);
            runs += 1;
            if still_fails(&cand) {
                cur = cand;
                progress = true;
            } else {
                i += chunk;
            }
        }
        if chunk > 1 {
            chunk /= 2;
        } else if !progress {
            return cur;
        }
    }
}
