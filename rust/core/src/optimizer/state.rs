//! Optimizer state shaped like MXNet's Python state objects, and the structure a rule expects.

use super::*;

/// An optimizer's per-parameter state, shaped like MXNet's Python state objects.
#[derive(Clone, Debug)]
pub enum State {
    /// No state (`None` in MXNet).
    None,
    /// One array.
    Array(NDArray),
    /// A tuple of states (arrays or `None`).
    Tuple(Vec<State>),
}

impl State {
    /// Every array in the state, in order.
    pub fn arrays(&self) -> Vec<&NDArray> {
        match self {
            State::None => vec![],
            State::Array(a) => vec![a],
            State::Tuple(v) => v.iter().flat_map(State::arrays).collect(),
        }
    }

    /// A short description such as `(array (4, 5), None)`, for messages.
    pub fn describe(&self) -> String {
        match self {
            State::None => "None".into(),
            State::Array(a) => format!(
                "array {}",
                crate::error::tuple_text(&format!("{:?}", a.shape()))
            ),
            State::Tuple(v) => tuple_of(v.iter().map(State::describe).collect()),
        }
    }
}

pub(super) fn tuple_of(items: Vec<String>) -> String {
    if items.len() == 1 {
        format!("({},)", items[0])
    } else {
        format!("({})", items.join(", "))
    }
}

/// The structure of the state a rule expects (arrays always have the weight's shape).
#[derive(Clone, Debug, PartialEq)]
pub enum StateSpec {
    /// `State::None`.
    None,
    /// One float32 array of the weight's shape.
    Array,
    /// A tuple of these.
    Tuple(Vec<StateSpec>),
}

impl StateSpec {
    pub(super) fn zeros(&self, shape: &[usize]) -> State {
        match self {
            StateSpec::None => State::None,
            StateSpec::Array => State::Array(NDArray::zeros(shape, DType::Float32)),
            StateSpec::Tuple(v) => State::Tuple(v.iter().map(|s| s.zeros(shape)).collect()),
        }
    }

    pub(super) fn describe(&self, shape: &str) -> String {
        match self {
            StateSpec::None => "None".into(),
            StateSpec::Array => format!("array {shape}"),
            StateSpec::Tuple(v) => tuple_of(v.iter().map(|s| s.describe(shape)).collect()),
        }
    }

    pub(super) fn matches(&self, state: &State, shape: &[usize]) -> bool {
        match (self, state) {
            (StateSpec::None, State::None) => true,
            (StateSpec::Array, State::Array(a)) => {
                a.dtype() == DType::Float32 && a.shape() == shape
            }
            (StateSpec::Tuple(s), State::Tuple(v)) => {
                s.len() == v.len() && s.iter().zip(v).all(|(s, v)| s.matches(v, shape))
            }
            _ => false,
        }
    }
}
