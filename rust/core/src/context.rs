//! Devices: `Context` (device type and id) as MXNet numbers them.

/// Where an array lives. mxfn computes on the CPU; `cpu(i)` for i > 0 are logical devices
/// (each gets its own executor and batch slice), and `gpu(i)` exists so that files and
/// calls naming a GPU can be read and refused with a clear message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Context {
    /// MXNet's device type code: 1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared.
    pub dev_type: i32,
    /// The device number.
    pub dev_id: i32,
}

impl Context {
    /// `cpu(id)`.
    pub const fn cpu(dev_id: i32) -> Self {
        Context {
            dev_type: 1,
            dev_id,
        }
    }

    /// `gpu(id)`.
    pub const fn gpu(dev_id: i32) -> Self {
        Context {
            dev_type: 2,
            dev_id,
        }
    }

    /// The device type's name as MXNet prints it.
    pub fn type_name(self) -> &'static str {
        match self.dev_type {
            2 => "gpu",
            3 => "cpu_pinned",
            5 => "cpu_shared",
            _ => "cpu",
        }
    }
}

impl Default for Context {
    fn default() -> Self {
        Context::cpu(0)
    }
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.type_name(), self.dev_id)
    }
}
