//! The one error type of mxfn-core, its `Result` alias, and the `bail!` / `ensure!` macros.

use std::fmt;

/// Every failure mxfn-core reports. Variants carry the context a user needs to fix the call;
/// the Python binding maps them by variant (never by message text).
#[derive(Debug)]
pub enum Error {
    /// An argument had a bad value: `what` names the argument, `expected` / `got` describe it.
    Invalid {
        /// The argument or option (e.g. `"dtype"`, `"nd.reshape: shape"`).
        what: String,
        /// What was expected.
        expected: String,
        /// What was given.
        got: String,
    },
    /// Shapes that do not fit together.
    Shape {
        /// The operation that failed (e.g. `"broadcast_add"`).
        op: String,
        /// Which argument or relation failed.
        arg: String,
        /// The shape that was expected.
        expected: String,
        /// The shape that was given.
        got: String,
    },
    /// A file that is not in the expected format (truncated, bad magic, …).
    Format {
        /// The file or stream being read.
        path: String,
        /// What is wrong with it.
        msg: String,
    },
    /// An operating-system I/O failure.
    Io {
        /// The file concerned.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A name that was looked up and is not there (a parameter, an operator, a key).
    NotFound {
        /// The kind of thing (`"parameter"`, `"operator"`).
        kind: String,
        /// The missing name.
        name: String,
    },
    /// A call made in the wrong order (forward before bind, …); `first` says what to call first.
    Lifecycle {
        /// The call that was made.
        call: String,
        /// What must be called before it.
        first: String,
    },
    /// A long call (fit, score, predict over an iterator) stopped between batches because its
    /// interrupt flag was raised (the Python binding raises it on Ctrl-C).
    Interrupted {
        /// The call that stopped.
        call: String,
    },
    /// Any other failure, with a message; `context` entries added while unwinding are prefixed.
    Msg(String),
    /// An error with context added by [`ResultExt::context`].
    Context {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: Box<Error>,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A bad argument value.
    pub fn invalid(
        what: impl Into<String>,
        expected: impl Into<String>,
        got: impl Into<String>,
    ) -> Self {
        Error::Invalid {
            what: what.into(),
            expected: expected.into(),
            got: got.into(),
        }
    }

    /// Incompatible shapes in `op`.
    pub fn shape(
        op: impl Into<String>,
        arg: impl Into<String>,
        expected: impl fmt::Debug,
        got: impl fmt::Debug,
    ) -> Self {
        Error::Shape {
            op: op.into(),
            arg: arg.into(),
            expected: tuple_text(&format!("{expected:?}")),
            got: tuple_text(&format!("{got:?}")),
        }
    }

    /// A malformed file.
    pub fn format(path: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            msg: msg.into(),
        }
    }

    /// The innermost error, below all added context.
    pub fn root(&self) -> &Error {
        match self {
            Error::Context { source, .. } => source.root(),
            e => e,
        }
    }
}

/// Rewrites Rust's `[2, 3]` / `[4]` list text as Python's `(2, 3)` / `(4,)` tuple text, so
/// shapes in messages read as Python users write them.
pub fn tuple_text(debug: &str) -> String {
    let mut out = String::with_capacity(debug.len());
    let mut items = 0;
    let mut any = false;
    for c in debug.chars() {
        match c {
            '[' => {
                out.push('(');
                items = 1;
                any = false;
            }
            ']' => {
                if items == 1 && any {
                    out.push(',');
                }
                out.push(')');
            }
            ',' => {
                items += 1;
                out.push(c);
            }
            c => {
                if !c.is_whitespace() {
                    any = true;
                }
                out.push(c);
            }
        }
    }
    out
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid {
                what,
                expected,
                got,
            } => {
                write!(f, "{what}: expected {expected}, got {got}")
            }
            Error::Shape {
                op,
                arg,
                expected,
                got,
            } => {
                write!(
                    f,
                    "{op}: shape mismatch for {arg}: expected {expected}, got {got}"
                )
            }
            Error::Format { path, msg } => write!(f, "{path}: {msg}"),
            Error::Io { path, source } => write!(f, "{path}: {source}"),
            Error::NotFound { kind, name } => write!(f, "unknown {kind} \"{name}\""),
            Error::Lifecycle { call, first } => write!(f, "{call}: call {first} first"),
            Error::Interrupted { call } => write!(f, "{call}: interrupted"),
            Error::Msg(m) => f.write_str(m),
            Error::Context { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Context { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// Adds context to errors while unwinding: `.context("loading fc1_weight from m-0003.params")`.
pub trait ResultExt<T> {
    /// Wraps the error with a description of what was being done.
    fn context(self, context: impl Into<String>) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Context {
            context: context.into(),
            source: Box::new(e),
        })
    }
}

/// Returns early with `Error::Msg(format!(...))`.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::error::Error::Msg(format!($($arg)*))) };
}

/// Returns early with `Error::Msg(format!(...))` unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => { if !$cond { $crate::bail!($($arg)*); } };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_print_as_python_tuples() {
        assert_eq!(tuple_text("[2, 3]"), "(2, 3)");
        assert_eq!(tuple_text("[4]"), "(4,)");
        assert_eq!(tuple_text("[]"), "()");
        assert_eq!(tuple_text("([2], [3, 1])"), "((2,), (3, 1))");
    }

    #[test]
    fn context_wraps_and_root_unwraps() {
        let r: Result<()> = Err(Error::invalid("dtype", "one of float32, …", "\"foo\""));
        let e = r.context("nd.zeros").unwrap_err();
        assert_eq!(
            e.to_string(),
            "nd.zeros: dtype: expected one of float32, …, got \"foo\""
        );
        assert!(matches!(e.root(), Error::Invalid { .. }));
    }
}
