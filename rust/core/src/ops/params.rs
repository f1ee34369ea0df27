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
    /// A non-negative integer (a size, an index).
    Usize,
    /// An integer >= 1 (a number of units, filters, groups).
    Positive,
    /// A count that sizes an operator's inputs or outputs (`num_args`, `num_outputs`): at
    /// least 1 and at most [`crate::limits::MAX_NUM_ARGS`], checked before anything is sized
    /// by it.
    Count,
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
            ParamKind::Usize => "int >= 0".into(),
            ParamKind::Positive => "int >= 1".into(),
            ParamKind::Count => format!(
                "int from 1 to {} (the limit MAX_NUM_ARGS)",
                crate::limits::MAX_NUM_ARGS
            ),
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

/// Declares an operator's parameters once: a struct with one typed field per parameter, its
/// `ParamDef` table (`DEFS`, what `OpDef::params` lists) and `from_params`, which reads the
/// parsed node into the struct. The name a user writes (`num_hidden`) is the field's name, so
/// no parameter is named twice.
///
/// ```ignore
/// op_params! {
///     /// FullyConnected's parameters.
///     pub struct FcParams {
///         num_hidden: Int, "Number of hidden nodes of the output.";
///         no_bias: Bool = "False", "Whether to disable the bias.";
///         act: Enum(&["relu", "tanh"]) = "relu", "The activation.";
///     }
/// }
/// ```
/// A parameter without `= "default"` is required.
#[macro_export]
macro_rules! op_params {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $field:ident : $kind:ident $(($arg:expr))? $(= $default:literal)? , $doc:literal ; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        #[allow(dead_code)]
        $vis struct $name {
            $( pub(crate) $field: $crate::op_params!(@type $kind), )*
        }

        #[allow(dead_code)]
        impl $name {
            /// The declared parameters, in order.
            pub const DEFS: &'static [$crate::ops::params::ParamDef] = &[
                $( $crate::ops::params::ParamDef {
                    name: stringify!($field),
                    kind: $crate::ops::params::ParamKind::$kind $(($arg))?,
                    default: $crate::op_params!(@default $($default)?),
                    doc: $doc,
                }, )*
            ];

            /// Reads a node's parsed parameters (defaults already filled in).
            pub fn from_params(p: &$crate::ops::params::Params) -> $crate::error::Result<Self> {
                Ok(Self {
                    $( $field: p.typed::<$crate::op_params!(@type $kind)>(stringify!($field))?, )*
                })
            }
        }
    };
    (@type Int) => { i64 };
    (@type OptInt) => { Option<i64> };
    (@type Usize) => { usize };
    (@type Positive) => { usize };
    (@type Count) => { usize };
    (@type Float) => { f64 };
    (@type OptFloat) => { Option<f64> };
    (@type Bool) => { bool };
    (@type Shape) => { Vec<i64> };
    (@type OptShape) => { Option<Vec<i64>> };
    (@type Enum) => { String };
    (@type Str) => { String };
    (@default) => { None };
    (@default $d:literal) => { Some($d) };
}

/// Reads one parsed value as a field type of [`op_params!`].
pub trait FromValue: Sized {
    /// The value as this type; `None` when the kinds disagree (a declaration bug).
    fn from_value(v: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(x) => Some(*x),
            _ => None,
        }
    }
}

impl FromValue for usize {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(x) => usize::try_from(*x).ok(),
            _ => None,
        }
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Float(x) => Some(*x),
            Value::Int(x) => Some(*x as f64),
            _ => None,
        }
    }
}

impl FromValue for bool {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Bool(x) => Some(*x),
            _ => None,
        }
    }
}

impl FromValue for Vec<i64> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Shape(x) => Some(x.clone()),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Str(x) => Some(x.clone()),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::None => Some(None),
            other => T::from_value(other).map(Some),
        }
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
        ParamKind::Usize => t.parse().ok().filter(|v| *v >= 0).map(Value::Int),
        ParamKind::Positive => t.parse().ok().filter(|v| *v >= 1).map(Value::Int),
        ParamKind::Count => t
            .parse()
            .ok()
            .filter(|v| (1..=crate::limits::MAX_NUM_ARGS as i64).contains(v))
            .map(Value::Int),
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

    /// Parameter `name` as the field type [`op_params!`] declared for it.
    pub fn typed<T: FromValue>(&self, name: &str) -> Result<T> {
        let v = self.get(name)?;
        T::from_value(v).ok_or_else(|| {
            Error::Msg(format!(
                "internal: {} parameter {name} is {v:?}, not the declared field type",
                self.op
            ))
        })
    }

    /// An error about parameter `name` of this node (for checks beyond parsing).
    pub fn error(&self, name: &str, expected: &str, got: impl std::fmt::Display) -> Error {
        debug_assert!(
            self.values.contains_key(name),
            "{} has no parameter {name} to blame",
            self.op
        );
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

    crate::op_params! {
        struct Demo {
            units: Positive, "Units.";
            inputs: Count = "2", "Inputs.";
            scale: Float = "1e-3", "Scale.";
            axes: OptShape = "None", "Axes.";
            mode: Enum(&["a", "b"]) = "a", "Mode.";
        }
    }

    static DEMO: OpDef = OpDef {
        name: "Demo",
        aliases: &[],
        py_name: None,
        doc: "",
        params: Demo::DEFS,
        create: |_| Err(Error::Msg("not instantiated in tests".into())),
        variadic: None,
    };

    fn demo(attrs: &[(&str, &str)]) -> Result<Demo> {
        let attrs = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Demo::from_params(&Params::parse(&DEMO, "n0", &attrs)?)
    }

    #[test]
    fn declared_fields_read_typed_values_with_defaults() {
        let d = demo(&[("units", "3"), ("axes", "(0, 2)"), ("__lr_mult__", "2")]).unwrap();
        assert_eq!(
            d,
            Demo {
                units: 3,
                inputs: 2,
                scale: 1e-3,
                axes: Some(vec![0, 2]),
                mode: "a".into(),
            }
        );
        assert_eq!(Demo::DEFS[0].name, "units");
        assert_eq!(Demo::DEFS[0].default, None);
        assert_eq!(Demo::DEFS[2].default, Some("1e-3"));
    }

    #[test]
    fn bad_values_name_the_parameter_and_its_range() {
        let msg = |attrs: &[(&str, &str)]| demo(attrs).unwrap_err().to_string();
        let m = msg(&[]);
        assert!(m.contains("\"units\"") && m.contains("required"), "{m}");
        let m = msg(&[("units", "0")]);
        assert!(m.contains("\"units\"") && m.contains("int >= 1"), "{m}");
        let m = msg(&[("units", "1"), ("inputs", "100000000")]);
        assert!(
            m.contains("\"inputs\"") && m.contains("MAX_NUM_ARGS") && m.contains("100000000"),
            "{m}"
        );
        let m = msg(&[("units", "1"), ("mode", "c")]);
        assert!(m.contains("one of 'a', 'b'"), "{m}");
        let m = msg(&[("units", "1"), ("unit", "1")]);
        assert!(
            m.contains("unknown parameter") && m.contains("units"),
            "{m}"
        );
    }

    #[test]
    fn every_registry_default_parses_and_variadic_counts_are_declared() {
        for def in super::super::registry().values() {
            let mut names = std::collections::BTreeSet::new();
            for p in def.params {
                assert!(
                    names.insert(p.name),
                    "{}: {} declared twice",
                    def.name,
                    p.name
                );
                if let Some(d) = p.default {
                    assert!(
                        parse_value(p.kind, d).is_some(),
                        "{}.{}: default {d} is not a {}",
                        def.name,
                        p.name,
                        p.kind.describe()
                    );
                }
            }
            if let Some(v) = def.variadic {
                let decl = def.params.iter().find(|p| p.name == v);
                assert!(
                    matches!(decl.map(|p| p.kind), Some(ParamKind::Count)),
                    "{}: variadic count {v} is not a declared Count",
                    def.name
                );
            }
        }
    }
}
