//! Operator parameters: declared once per op (`ParamDef`), parsed from MXNet's string
//! attributes into typed values with MXNet's defaults, errors naming op, node and parameter.

use super::OpDef;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The type of a parameter, which fixes how its string form is parsed.
#[derive(Clone, Copy, Debug)]
pub enum ParamKind {
    /// An integer (`"10"`).
    Int,
    /// An integer or `"None"`.
    OptInt,
    /// A float (`"0.001"`, `"1e-5"`).
    Float,
    /// A float or `"None"`.
    OptFloat,
    /// `"True"` / `"False"` (also `"1"`/`"0"`, `"true"`/`"false"`).
    Bool,
    /// A tuple of integers (`"(3, 3)"`, `"(2,)"`, `"[1,2]"`, or a bare `"3"`).
    Shape,
    /// A tuple of integers or `"None"`.
    OptShape,
    /// One of the listed strings.
    Enum(&'static [&'static str]),
    /// Any string.
    Str,
}

impl ParamKind {
    /// The type as documentation shows it.
    pub fn describe(&self) -> String {
        match self {
            ParamKind::Int => "int".into(),
            ParamKind::OptInt => "int or None".into(),
            ParamKind::Float => "float".into(),
            ParamKind::OptFloat => "float or None".into(),
            ParamKind::Bool => "boolean".into(),
            ParamKind::Shape => "shape (tuple of ints)".into(),
            ParamKind::OptShape => "shape or None".into(),
            ParamKind::Enum(v) => format!(
                "one of {}",
                v.iter()
                    .map(|s| format!("'{s}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ParamKind::Str => "string".into(),
        }
    }
}

/// One declared parameter.
#[derive(Clone, Copy, Debug)]
pub struct ParamDef {
    /// MXNet's name (`num_hidden`).
    pub name: &'static str,
    /// Its type.
    pub kind: ParamKind,
    /// MXNet's default in string form; `None` = required.
    pub default: Option<&'static str>,
    /// One-line doc.
    pub doc: &'static str,
}

/// Shorthand for a `ParamDef`.
pub const fn param(
    name: &'static str,
    kind: ParamKind,
    default: Option<&'static str>,
    doc: &'static str,
) -> ParamDef {
    ParamDef {
        name,
        kind,
        default,
        doc,
    }
}

/// A parsed parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Integer.
    Int(i64),
    /// Float.
    Float(f64),
    /// Boolean.
    Bool(bool),
    /// Tuple of integers.
    Shape(Vec<i64>),
    /// String (enums too).
    Str(String),
    /// `None`.
    None,
}

/// The parsed parameters of one node.
#[derive(Clone, Debug)]
pub struct Params {
    /// The op's MXNet name.
    pub op: &'static str,
    /// The node's name.
    pub node: String,
    values: BTreeMap<&'static str, Value>,
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim() {
        "True" | "true" | "1" => Some(true),
        "False" | "false" | "0" => Some(false),
        _ => None,
    }
}

/// Parses MXNet's tuple text: `"(3, 3)"`, `"(2,)"`, `"[1, 2]"`, `"()"`, or a bare `"3"`.
pub fn parse_shape(s: &str) -> Option<Vec<i64>> {
    let t = s.trim();
    let inner =
        if (t.starts_with('(') && t.ends_with(')')) || (t.starts_with('[') && t.ends_with(']')) {
            &t[1..t.len() - 1]
        } else {
            t
        };
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.trim_end_matches('L').parse::<i64>().ok())
        .collect()
}

fn parse_value(kind: ParamKind, s: &str) -> Option<Value> {
    let t = s.trim();
    let none = t == "None";
    match kind {
        ParamKind::Int => t.parse().ok().map(Value::Int),
        ParamKind::OptInt if none => Some(Value::None),
        ParamKind::OptInt => t.parse().ok().map(Value::Int),
        ParamKind::Float => t.parse().ok().map(Value::Float),
        ParamKind::OptFloat if none => Some(Value::None),
        ParamKind::OptFloat => t.parse().ok().map(Value::Float),
        ParamKind::Bool => parse_bool(t).map(Value::Bool),
        ParamKind::Shape => parse_shape(t).map(Value::Shape),
        ParamKind::OptShape if none => Some(Value::None),
        ParamKind::OptShape => parse_shape(t).map(Value::Shape),
        ParamKind::Enum(v) => v
            .iter()
            .find(|x| **x == t)
            .map(|x| Value::Str(x.to_string())),
        ParamKind::Str => Some(Value::Str(t.to_string())),
    }
}

impl Params {
    /// Parses `attrs` against `def.params`: fills defaults, rejects unknown names and bad
    /// values. Attribute names of the form `__x__` (MXNet's reserved keys) are skipped.
    pub fn parse(
        def: &'static OpDef,
        node: &str,
        attrs: &BTreeMap<String, String>,
    ) -> Result<Params> {
        let mut values = BTreeMap::new();
        for (k, v) in attrs {
            if k.starts_with("__") && k.ends_with("__") {
                continue;
            }
            let Some(pd) = def.params.iter().find(|p| p.name == k) else {
                let valid: Vec<&str> = def.params.iter().map(|p| p.name).collect();
                return Err(Error::invalid(
                    format!("{} node \"{node}\": parameter \"{k}\"", def.name),
                    if valid.is_empty() {
                        "no parameters".to_string()
                    } else {
                        format!("one of {}", valid.join(", "))
                    },
                    "an unknown parameter",
                ));
            };
            let val = parse_value(pd.kind, v).ok_or_else(|| {
                Error::invalid(
                    format!("{} node \"{node}\": parameter \"{k}\"", def.name),
                    pd.kind.describe(),
                    format!("\"{v}\""),
                )
            })?;
            values.insert(pd.name, val);
        }
        for pd in def.params {
            if values.contains_key(pd.name) {
                continue;
            }
            match pd.default {
                Some(d) => {
                    let val = parse_value(pd.kind, d).ok_or_else(|| {
                        Error::Msg(format!(
                            "internal: bad default {d} for {}.{}",
                            def.name, pd.name
                        ))
                    })?;
                    values.insert(pd.name, val);
                }
                None => {
                    return Err(Error::invalid(
                        format!("{} node \"{node}\": parameter \"{}\"", def.name, pd.name),
                        format!("a value ({}, required)", pd.kind.describe()),
                        "nothing",
                    ))
                }
            }
        }
        Ok(Params {
            op: def.name,
            node: node.to_string(),
            values,
        })
    }

    fn get(&self, name: &str) -> Result<&Value> {
        self.values
            .get(name)
            .ok_or_else(|| Error::Msg(format!("internal: {} has no parameter {name}", self.op)))
    }

    fn bad(&self, name: &str, expected: &str, got: impl std::fmt::Display) -> Error {
        Error::invalid(
            format!("{} node \"{}\": parameter \"{name}\"", self.op, self.node),
            expected,
            got.to_string(),
        )
    }

    /// An integer parameter.
    pub fn int(&self, name: &str) -> Result<i64> {
        match self.get(name)? {
            Value::Int(v) => Ok(*v),
            other => Err(self.bad(name, "an int", format!("{other:?}"))),
        }
    }

    /// A non-negative integer parameter that must be at least `min`.
    pub fn usize_min(&self, name: &str, min: usize) -> Result<usize> {
        let v = self.int(name)?;
        if v < min as i64 {
            return Err(self.bad(name, &format!("an int >= {min}"), v));
        }
        Ok(v as usize)
    }

    /// A count that sizes an operator's inputs or outputs (`num_args` of a variadic
    /// operator, `num_outputs` of `SliceChannel`): at least 1 and at most
    /// [`crate::limits::MAX_NUM_ARGS`], checked before anything is sized by it.
    pub fn num_args(&self, name: &str) -> Result<usize> {
        let n = self.usize_min(name, 1)?;
        if n > crate::limits::MAX_NUM_ARGS {
            return Err(self.bad(
                name,
                &format!(
                    "at most {} (the limit MAX_NUM_ARGS)",
                    crate::limits::MAX_NUM_ARGS
                ),
                n,
            ));
        }
        Ok(n)
    }

    /// An optional integer parameter.
    pub fn opt_int(&self, name: &str) -> Result<Option<i64>> {
        match self.get(name)? {
            Value::Int(v) => Ok(Some(*v)),
            Value::None => Ok(None),
            other => Err(self.bad(name, "an int or None", format!("{other:?}"))),
        }
    }

    /// A float parameter.
    pub fn float(&self, name: &str) -> Result<f64> {
        match self.get(name)? {
            Value::Float(v) => Ok(*v),
            Value::Int(v) => Ok(*v as f64),
            other => Err(self.bad(name, "a float", format!("{other:?}"))),
        }
    }

    /// An optional float parameter.
    pub fn opt_float(&self, name: &str) -> Result<Option<f64>> {
        match self.get(name)? {
            Value::Float(v) => Ok(Some(*v)),
            Value::None => Ok(None),
            other => Err(self.bad(name, "a float or None", format!("{other:?}"))),
        }
    }

    /// A boolean parameter.
    pub fn bool(&self, name: &str) -> Result<bool> {
        match self.get(name)? {
            Value::Bool(v) => Ok(*v),
            other => Err(self.bad(name, "a boolean", format!("{other:?}"))),
        }
    }

    /// A tuple parameter.
    pub fn shape(&self, name: &str) -> Result<Vec<i64>> {
        match self.get(name)? {
            Value::Shape(v) => Ok(v.clone()),
            other => Err(self.bad(name, "a shape", format!("{other:?}"))),
        }
    }

    /// An optional tuple parameter.
    pub fn opt_shape(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.get(name)? {
            Value::Shape(v) => Ok(Some(v.clone())),
            Value::None => Ok(None),
            other => Err(self.bad(name, "a shape or None", format!("{other:?}"))),
        }
    }

    /// A string or enum parameter.
    pub fn str(&self, name: &str) -> Result<String> {
        match self.get(name)? {
            Value::Str(v) => Ok(v.clone()),
            other => Err(self.bad(name, "a string", format!("{other:?}"))),
        }
    }

    /// An error about parameter `name` of this node (for checks beyond parsing).
    pub fn error(&self, name: &str, expected: &str, got: impl std::fmt::Display) -> Error {
        self.bad(name, expected, got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mxnet_string_forms_parse() {
        assert_eq!(parse_shape("(3, 3)"), Some(vec![3, 3]));
        assert_eq!(parse_shape("(2,)"), Some(vec![2]));
        assert_eq!(parse_shape("[0, -1]"), Some(vec![0, -1]));
        assert_eq!(parse_shape("()"), Some(vec![]));
        assert_eq!(parse_shape("4"), Some(vec![4]));
        assert_eq!(parse_shape("(a, 1)"), None);
        assert_eq!(
            parse_value(ParamKind::Bool, "True"),
            Some(Value::Bool(true))
        );
        assert_eq!(parse_value(ParamKind::OptInt, "None"), Some(Value::None));
        assert_eq!(
            parse_value(ParamKind::Float, "1e-3"),
            Some(Value::Float(1e-3))
        );
        assert_eq!(
            parse_value(ParamKind::Enum(&["relu", "tanh"]), "sigmoid"),
            None
        );
    }
}
