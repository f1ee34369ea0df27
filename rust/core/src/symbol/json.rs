//! MXNet's symbol JSON (written in a later step).
