//! Parameter initializers, MXNet 1.9.1's `mx.init`: Uniform, Normal, Xavier, MSRAPrelu,
//! Constant, Zero, One, Orthogonal, Bilinear, LSTMBias, Mixed and Load, with MXNet's
//! name rules (…weight → the initializer, …bias → 0, …gamma → 1, a `__init__` attribute wins).
//!
//! Random draws come from the global seeded stream ([`crate::tensor::random`]), so
//! `random::seed(n)` makes initialisation reproducible.
//!
//! ```
//! use mxfn_core::initializer::Initializer;
//! use mxfn_core::{DType, NDArray};
//! let init = Initializer::from_json(r#"["xavier", {"magnitude": 2}]"#).unwrap();
//! let w = init.apply("fc1_weight", None, &NDArray::zeros(&[4, 8], DType::Float32)).unwrap();
//! assert!(w.to_f64_vec().iter().all(|v| v.abs() <= (2.0f64 / 6.0).sqrt()));
//! let b = init.apply("fc1_bias", None, &NDArray::ones(&[4], DType::Float32)).unwrap();
//! assert_eq!(b.to_f64_vec(), vec![0.0; 4]);
//! ```

use crate::error::{Error, Result};
use crate::metric::suggest;
use crate::tensor::{random, NDArray};
use rand_distr::{Normal, Uniform};
use rayon::prelude::*;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Which fan Xavier scales by (MXNet's `factor_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FactorType {
    /// (fan_in + fan_out) / 2.
    Avg,
    /// fan_in.
    In,
    /// fan_out.
    Out,
}

impl FactorType {
    /// Parses `"avg"`, `"in"` or `"out"`.
    pub fn parse(what: &str, s: &str) -> Result<Self> {
        match s {
            "avg" => Ok(FactorType::Avg),
            "in" => Ok(FactorType::In),
            "out" => Ok(FactorType::Out),
            _ => Err(Error::invalid(
                what,
                "\"avg\", \"in\" or \"out\"",
                format!("\"{s}\""),
            )),
        }
    }

    /// The MXNet name.
    pub fn name(self) -> &'static str {
        match self {
            FactorType::Avg => "avg",
            FactorType::In => "in",
            FactorType::Out => "out",
        }
    }
}

/// The distribution a random initializer draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RandType {
    /// Uniform (Xavier: on [−scale, scale); Orthogonal: U(−1, 1) before orthogonalising).
    Uniform,
    /// Normal (Xavier's `"gaussian"`, Orthogonal's `"normal"`).
    Normal,
}

/// Chooses which parameters a [`Initializer::Mixed`] rule applies to. Python's `mx.init.mixed`
/// matches its patterns with `re.match` in Python and never builds these; Rust callers use
/// [`NameMatcher::prefix`], [`NameMatcher::any`] or their own predicate.
#[derive(Clone)]
pub struct NameMatcher {
    desc: String,
    f: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

impl NameMatcher {
    /// A matcher from a predicate; `desc` describes it in messages.
    pub fn new(desc: &str, f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        NameMatcher {
            desc: desc.to_string(),
            f: Arc::new(f),
        }
    }

    /// Names starting with `p` (what a plain-text regex means under `re.match`).
    pub fn prefix(p: &str) -> Self {
        let s = p.to_string();
        Self::new(p, move |n| n.starts_with(&s))
    }

    /// Every name (the `".*"` fallback).
    pub fn any() -> Self {
        Self::new(".*", |_| true)
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        (self.f)(name)
    }
}

impl fmt::Debug for NameMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NameMatcher({:?})", self.desc)
    }
}

/// An initializer. [`apply`](Self::apply) fills a parameter by MXNet's name rules;
/// [`init_weight`](Self::init_weight) is the initializer's own rule (MXNet's `_init_weight`).
#[derive(Clone, Debug)]
pub enum Initializer {
    /// Uniform on [−scale, scale) (default scale 0.07).
    Uniform {
        /// Half-width of the interval.
        scale: f64,
    },
    /// Normal with mean 0 (default sigma 0.01).
    Normal {
        /// Standard deviation.
        sigma: f64,
    },
    /// Xavier/Glorot: scale = sqrt(magnitude / factor) from the weight's fans.
    Xavier {
        /// Uniform on [−scale, scale) or normal with std scale.
        rnd_type: RandType,
        /// Which fan the factor uses.
        factor_type: FactorType,
        /// Default 3.
        magnitude: f64,
    },
    /// He/MSRA for PReLU: Xavier(gaussian, factor_type, magnitude = 2 / (1 + slope²)).
    MsraPrelu {
        /// Default "avg".
        factor_type: FactorType,
        /// Default 0.25.
        slope: f64,
    },
    /// Every weight value `value`.
    Constant {
        /// The fill value.
        value: f64,
    },
    /// Weights 0.
    Zero,
    /// Weights 1.
    One,
    /// A random orthogonal matrix (rows or columns orthonormal) times `scale`.
    Orthogonal {
        /// Default 1.414.
        scale: f64,
        /// U(−1, 1) or N(0, 1) draws before orthogonalising (default uniform).
        rand_type: RandType,
    },
    /// Bilinear upsampling kernels (4-D weights).
    Bilinear,
    /// LSTM bias: 0 except the forget gate block (the second quarter), `forget_bias`.
    LstmBias {
        /// Default 1.0.
        forget_bias: f64,
    },
    /// The first rule whose matcher accepts the name applies (MXNet's Mixed).
    Mixed(Vec<(NameMatcher, Initializer)>),
    /// Values from `params` (keys without `arg:`/`aux:`), else `default`.
    Load {
        /// Parameter values by name.
        params: BTreeMap<String, NDArray>,
        /// For names not in `params`; `None` makes them an error.
        default: Option<Box<Initializer>>,
    },
}

/// The names `create` accepts (matched case-insensitively), with the canonical name.
const NAMES: &[(&str, &str)] = &[
    ("uniform", "uniform"),
    ("normal", "normal"),
    ("xavier", "xavier"),
    ("msraprelu", "msraprelu"),
    ("msra_prelu", "msraprelu"),
    ("constant", "constant"),
    ("zero", "zero"),
    ("zeros", "zero"),
    ("one", "one"),
    ("ones", "one"),
    ("orthogonal", "orthogonal"),
    ("bilinear", "bilinear"),
    ("lstmbias", "lstmbias"),
    ("lstm_bias", "lstmbias"),
];

/// Name suffixes initialised to 0 / 1 whatever the initializer (SPEC §2: MXNet's InitDesc
/// rules plus the moving statistics of its legacy string rules).
const ZERO_SUFFIXES: &[&str] = &[
    "bias",
    "beta",
    "min",
    "moving_mean",
    "running_mean",
    "moving_inv_var",
    "moving_avg",
];
const ONE_SUFFIXES: &[&str] = &["gamma", "max", "moving_var", "running_var"];

fn num(fname: &str, key: &str, v: &Value) -> Result<f64> {
    v.as_f64()
        .ok_or_else(|| Error::invalid(format!("{fname}: {key}"), "a number", v.to_string()))
}

fn text<'a>(fname: &str, key: &str, v: &'a Value) -> Result<&'a str> {
    v.as_str()
        .ok_or_else(|| Error::invalid(format!("{fname}: {key}"), "a string", v.to_string()))
}

fn finite_nonneg(fname: &str, key: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(Error::invalid(
            format!("{fname}: {key}"),
            "a finite number >= 0",
            v.to_string(),
        ))
    }
}

impl Initializer {
    /// Uniform on [−scale, scale).
    pub fn uniform(scale: f64) -> Result<Self> {
        Ok(Initializer::Uniform {
            scale: finite_nonneg("initializer.uniform", "scale", scale)?,
        })
    }

    /// Normal(0, sigma).
    pub fn normal(sigma: f64) -> Result<Self> {
        Ok(Initializer::Normal {
            sigma: finite_nonneg("initializer.normal", "sigma", sigma)?,
        })
    }

    /// Xavier with MXNet's defaults (`uniform`, `avg`, magnitude 3).
    pub fn xavier_default() -> Self {
        Initializer::Xavier {
            rnd_type: RandType::Uniform,
            factor_type: FactorType::Avg,
            magnitude: 3.0,
        }
    }

    /// An initializer by name (`"xavier"`, `"zeros"`, `"msraprelu"`, …) with MXNet's keyword
    /// arguments as a JSON object (`Null` for none). Xavier takes `rnd_type` (alias
    /// `rand_type`): `"uniform"` or `"gaussian"`.
    pub fn create(name: &str, kwargs: &Value) -> Result<Self> {
        let lower = name.to_lowercase();
        let Some(&(_, canon)) = NAMES.iter().find(|(n, _)| *n == lower) else {
            let all: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
            return Err(Error::invalid(
                "initializer.create: name",
                suggest(&lower, &all),
                format!("\"{name}\""),
            ));
        };
        let fname = format!("initializer.{canon}");
        let empty = Map::new();
        let kw = match kwargs {
            Value::Null => &empty,
            Value::Object(m) => m,
            other => {
                return Err(Error::invalid(
                    format!("{fname}: arguments"),
                    "a JSON object",
                    other.to_string(),
                ))
            }
        };
        let allowed: &[&str] = match canon {
            "uniform" => &["scale"],
            "normal" => &["sigma"],
            "xavier" => &["rnd_type", "rand_type", "factor_type", "magnitude"],
            "msraprelu" => &["factor_type", "slope"],
            "constant" => &["value"],
            "orthogonal" => &["scale", "rand_type"],
            "lstmbias" => &["forget_bias"],
            _ => &[],
        };
        for k in kw.keys() {
            if !allowed.contains(&k.as_str()) {
                let expected = if allowed.is_empty() {
                    "no arguments".to_string()
                } else {
                    suggest(k, allowed)
                };
                return Err(Error::invalid(
                    format!("{fname}: argument \"{k}\""),
                    expected,
                    format!("\"{k}\""),
                ));
            }
        }
        let get = |k: &str| kw.get(k).filter(|v| !v.is_null());
        let f = |k: &str, d: f64| get(k).map_or(Ok(d), |v| num(&fname, k, v));
        let factor = || match get("factor_type") {
            None => Ok(FactorType::Avg),
            Some(v) => FactorType::parse(
                &format!("{fname}: factor_type"),
                text(&fname, "factor_type", v)?,
            ),
        };
        Ok(match canon {
            "uniform" => Self::uniform(f("scale", 0.07)?)?,
            "normal" => Self::normal(f("sigma", 0.01)?)?,
            "xavier" => {
                let rnd = match (get("rnd_type"), get("rand_type")) {
                    (Some(_), Some(_)) => {
                        return Err(Error::invalid(
                            format!("{fname}: rnd_type"),
                            "one of rnd_type and its alias rand_type",
                            "both",
                        ))
                    }
                    (Some(v), None) | (None, Some(v)) => text(&fname, "rnd_type", v)?,
                    (None, None) => "uniform",
                };
                let rnd_type = match rnd {
                    "uniform" => RandType::Uniform,
                    "gaussian" => RandType::Normal,
                    other => {
                        return Err(Error::invalid(
                            format!("{fname}: rnd_type"),
                            "\"uniform\" or \"gaussian\"",
                            format!("\"{other}\""),
                        ))
                    }
                };
                Initializer::Xavier {
                    rnd_type,
                    factor_type: factor()?,
                    magnitude: finite_nonneg(&fname, "magnitude", f("magnitude", 3.0)?)?,
                }
            }
            "msraprelu" => {
                let slope = f("slope", 0.25)?;
                if !slope.is_finite() {
                    return Err(Error::invalid(
                        format!("{fname}: slope"),
                        "a finite number",
                        slope.to_string(),
                    ));
                }
                Initializer::MsraPrelu {
                    factor_type: factor()?,
                    slope,
                }
            }
            "constant" => match get("value") {
                Some(v) => Initializer::Constant {
                    value: num(&fname, "value", v)?,
                },
                None => {
                    return Err(Error::invalid(
                        format!("{fname}: value"),
                        "a number (required)",
                        "nothing",
                    ))
                }
            },
            "zero" => Initializer::Zero,
            "one" => Initializer::One,
            "orthogonal" => {
                let rand_type = match get("rand_type").map(|v| text(&fname, "rand_type", v)) {
                    None => RandType::Uniform,
                    Some(Ok("uniform")) => RandType::Uniform,
                    Some(Ok("normal")) => RandType::Normal,
                    Some(Ok(other)) => {
                        return Err(Error::invalid(
                            format!("{fname}: rand_type"),
                            "\"uniform\" or \"normal\"",
                            format!("\"{other}\""),
                        ))
                    }
                    Some(Err(e)) => return Err(e),
                };
                let scale = f("scale", 1.414)?;
                if !scale.is_finite() {
                    return Err(Error::invalid(
                        format!("{fname}: scale"),
                        "a finite number",
                        scale.to_string(),
                    ));
                }
                Initializer::Orthogonal { scale, rand_type }
            }
            "bilinear" => Initializer::Bilinear,
            _ => Initializer::LstmBias {
                forget_bias: f("forget_bias", 1.0)?,
            },
        })
    }

    /// Parses MXNet's initializer spec: the JSON of `dumps()` (`["xavier", {"magnitude": 2}]`),
    /// or a plain registered name (`"ones"`), as found in a variable's `__init__` attribute.
    pub fn from_json(spec: &str) -> Result<Self> {
        let s = spec.trim();
        if !s.starts_with('[') && !s.starts_with('"') {
            return Self::create(s, &Value::Null);
        }
        let bad = |got: String| {
            Error::invalid(
                "initializer spec",
                "JSON like [\"xavier\", {\"magnitude\": 2}] or a name like \"ones\"",
                got,
            )
        };
        let v: Value = serde_json::from_str(s).map_err(|e| bad(format!("{s} ({e})")))?;
        match &v {
            Value::String(name) => Self::create(name, &Value::Null),
            Value::Array(items) => match items.as_slice() {
                [Value::String(name)] => Self::create(name, &Value::Null),
                [Value::String(name), kw] => Self::create(name, kw),
                _ => Err(bad(s.to_string())),
            },
            _ => Err(bad(s.to_string())),
        }
    }

    /// MXNet's `dumps()`: `["name", {kwargs}]` with MXNet's class name and keyword names
    /// (the string a variable's `__init__` attribute holds). Mixed and Load have none.
    pub fn to_json(&self) -> Result<String> {
        let f = |v: f64| Value::from(v).to_string();
        let s = |v: &str| Value::from(v).to_string();
        let (name, kw): (&str, Vec<(&str, String)>) = match self {
            Initializer::Uniform { scale } => ("uniform", vec![("scale", f(*scale))]),
            Initializer::Normal { sigma } => ("normal", vec![("sigma", f(*sigma))]),
            Initializer::Xavier {
                rnd_type,
                factor_type,
                magnitude,
            } => (
                "xavier",
                vec![
                    (
                        "rnd_type",
                        s(match rnd_type {
                            RandType::Uniform => "uniform",
                            RandType::Normal => "gaussian",
                        }),
                    ),
                    ("factor_type", s(factor_type.name())),
                    ("magnitude", f(*magnitude)),
                ],
            ),
            Initializer::MsraPrelu { factor_type, slope } => (
                "msraprelu",
                vec![("factor_type", s(factor_type.name())), ("slope", f(*slope))],
            ),
            Initializer::Constant { value } => ("constant", vec![("value", f(*value))]),
            Initializer::Zero => ("zero", vec![]),
            Initializer::One => ("one", vec![]),
            Initializer::Orthogonal { scale, rand_type } => (
                "orthogonal",
                vec![
                    ("scale", f(*scale)),
                    (
                        "rand_type",
                        s(match rand_type {
                            RandType::Uniform => "uniform",
                            RandType::Normal => "normal",
                        }),
                    ),
                ],
            ),
            Initializer::Bilinear => ("bilinear", vec![]),
            Initializer::LstmBias { forget_bias } => {
                ("lstmbias", vec![("forget_bias", f(*forget_bias))])
            }
            Initializer::Mixed(_) | Initializer::Load { .. } => {
                return Err(Error::invalid(
                    "initializer.dumps",
                    "a registered initializer (mixed and load have no JSON form)",
                    self.kind_name(),
                ))
            }
        };
        let body: Vec<String> = kw.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
        Ok(format!("[\"{name}\", {{{}}}]", body.join(", ")))
    }

    /// The initializer's name (`"xavier"`, `"mixed"`, …).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Initializer::Uniform { .. } => "uniform",
            Initializer::Normal { .. } => "normal",
            Initializer::Xavier { .. } => "xavier",
            Initializer::MsraPrelu { .. } => "msraprelu",
            Initializer::Constant { .. } => "constant",
            Initializer::Zero => "zero",
            Initializer::One => "one",
            Initializer::Orthogonal { .. } => "orthogonal",
            Initializer::Bilinear => "bilinear",
            Initializer::LstmBias { .. } => "lstmbias",
            Initializer::Mixed(_) => "mixed",
            Initializer::Load { .. } => "load",
        }
    }

    /// A new array of `arr`'s shape, dtype and context, initialised for parameter `name`:
    /// a non-empty `__init__` attribute in `attrs` is applied through its initializer's weight
    /// rule; otherwise the name decides — `…weight` gets [`init_weight`](Self::init_weight),
    /// `…bias`, `…beta`, `…min`, `…moving_mean`, `…running_mean`, `…moving_inv_var`,
    /// `…moving_avg` get 0, `…gamma`, `…max`, `…moving_var`, `…running_var` get 1; any other
    /// name is an error naming it. Mixed and Load dispatch first (Load's hits need no rule).
    /// `arr` itself is not changed.
    pub fn apply(
        &self,
        name: &str,
        attrs: Option<&BTreeMap<String, String>>,
        arr: &NDArray,
    ) -> Result<NDArray> {
        match self {
            Initializer::Mixed(rules) => match rules.iter().find(|(m, _)| m.matches(name)) {
                Some((_, init)) => init.apply(name, attrs, arr),
                None => {
                    let pats: Vec<String> =
                        rules.iter().map(|(m, _)| format!("{:?}", m.desc)).collect();
                    Err(Error::invalid(
                        format!("initializer.mixed: parameter \"{name}\""),
                        format!(
                            "a name matching one of the patterns [{}] (add \".*\" last for a default)",
                            pats.join(", ")
                        ),
                        format!("\"{name}\""),
                    ))
                }
            },
            Initializer::Load { params, default } => match params.get(name) {
                Some(v) => {
                    if v.shape() != arr.shape() {
                        return Err(Error::shape(
                            format!("initializer.load: parameter \"{name}\""),
                            "loaded value",
                            arr.shape(),
                            v.shape(),
                        ));
                    }
                    Ok(v.astype(arr.dtype())
                        .deep_copy()
                        .as_in_context(arr.context()))
                }
                None => match default {
                    Some(d) => d.apply(name, attrs, arr),
                    None => Err(Error::invalid(
                        format!("initializer.load: parameter \"{name}\""),
                        "a name among the loaded parameters, or a default_init",
                        format!("\"{name}\" (not loaded, no default_init)"),
                    )),
                },
            },
            _ => {
                if let Some(spec) = attrs
                    .and_then(|a| a.get("__init__"))
                    .filter(|s| !s.is_empty())
                {
                    let init = Self::from_json(spec).map_err(|e| crate::error::Error::Context {
                        context: format!("initializer: __init__ attribute of \"{name}\""),
                        source: Box::new(e),
                    })?;
                    return init.init_weight(name, arr);
                }
                if name.ends_with("weight") {
                    self.init_weight(name, arr)
                } else if ZERO_SUFFIXES.iter().any(|s| name.ends_with(s)) {
                    Ok(filled(arr, 0.0))
                } else if ONE_SUFFIXES.iter().any(|s| name.ends_with(s)) {
                    Ok(filled(arr, 1.0))
                } else {
                    Err(Error::invalid(
                        format!("initializer: parameter \"{name}\""),
                        "a name ending in weight, bias, gamma, beta, min, max, moving_mean, \
                         moving_var, running_mean, running_var, moving_inv_var or moving_avg, \
                         or an __init__ attribute (a variable made with init=...)",
                        format!("\"{name}\""),
                    ))
                }
            }
        }
    }

    /// The initializer's own rule for a weight (MXNet's `_init_weight`), ignoring name rules;
    /// `name` only labels errors. Returns a new array like `arr`.
    pub fn init_weight(&self, name: &str, arr: &NDArray) -> Result<NDArray> {
        let shape = arr.shape();
        let (dt, ctx) = (arr.dtype(), arr.context());
        let out = match self {
            Initializer::Uniform { scale } => random::uniform(-scale, *scale, shape, dt)?,
            Initializer::Normal { sigma } => random::normal(0.0, *sigma, shape, dt)?,
            Initializer::Xavier {
                rnd_type,
                factor_type,
                magnitude,
            } => xavier(name, shape, dt, *rnd_type, *factor_type, *magnitude)?,
            Initializer::MsraPrelu { factor_type, slope } => xavier(
                name,
                shape,
                dt,
                RandType::Normal,
                *factor_type,
                2.0 / (1.0 + slope * slope),
            )?,
            Initializer::Constant { value } => filled(arr, *value),
            Initializer::Zero => filled(arr, 0.0),
            Initializer::One => filled(arr, 1.0),
            Initializer::Orthogonal { scale, rand_type } => {
                orthogonal(name, shape, dt, *scale, *rand_type)?
            }
            Initializer::Bilinear => {
                if shape.len() != 4 {
                    return Err(Error::invalid(
                        format!("initializer.bilinear: parameter \"{name}\""),
                        "a 4-D weight",
                        format!("shape {}", crate::error::tuple_text(&format!("{shape:?}"))),
                    ));
                }
                NDArray::from_f64_slice(shape, &bilinear(shape), dt)?
            }
            Initializer::LstmBias { forget_bias } => {
                let n = arr.size();
                let rows = shape.first().copied().unwrap_or(1);
                let per_row = n.checked_div(rows).unwrap_or(0);
                let h = rows / 4;
                let mut v = vec![0.0; n];
                v[h * per_row..2 * h * per_row].fill(*forget_bias);
                NDArray::from_f64_slice(shape, &v, dt)?
            }
            Initializer::Mixed(_) | Initializer::Load { .. } => return self.apply(name, None, arr),
        };
        Ok(out.as_in_context(ctx))
    }
}

fn filled(arr: &NDArray, v: f64) -> NDArray {
    NDArray::full(arr.shape(), v, arr.dtype()).as_in_context(arr.context())
}

/// MXNet's fans: `hw = d2·d3·…`, `fan_in = d1·hw`, `fan_out = d0·hw`.
pub fn fans(shape: &[usize]) -> Option<(f64, f64)> {
    if shape.len() < 2 {
        return None;
    }
    let hw: f64 = shape[2..].iter().map(|&d| d as f64).product();
    Some((shape[1] as f64 * hw, shape[0] as f64 * hw))
}

fn xavier(
    name: &str,
    shape: &[usize],
    dt: crate::tensor::DType,
    rnd: RandType,
    factor_type: FactorType,
    magnitude: f64,
) -> Result<NDArray> {
    let Some((fan_in, fan_out)) = fans(shape) else {
        return Err(Error::invalid(
            format!("initializer.xavier: parameter \"{name}\""),
            "a weight with at least 2 dimensions",
            format!("shape {}", crate::error::tuple_text(&format!("{shape:?}"))),
        ));
    };
    let factor = match factor_type {
        FactorType::Avg => (fan_in + fan_out) / 2.0,
        FactorType::In => fan_in,
        FactorType::Out => fan_out,
    };
    let scale = (magnitude / factor).sqrt();
    let scale = if scale.is_finite() { scale } else { 0.0 };
    match rnd {
        RandType::Uniform => random::uniform(-scale, scale, shape, dt),
        RandType::Normal => random::normal(0.0, scale, shape, dt),
    }
}

/// MXNet's `_init_bilinear` values, computed in f64 like numpy.
fn bilinear(shape: &[usize]) -> Vec<f64> {
    let n: usize = shape.iter().product();
    let (h, w) = (shape[2], shape[3]);
    let f = (w as f64 / 2.0).ceil();
    let c = (2.0 * f - 1.0 - f % 2.0) / (2.0 * f);
    (0..n)
        .map(|i| {
            let x = (i % w) as f64;
            let y = ((i / w) % h.max(1)) as f64;
            (1.0 - (x / f - c).abs()) * (1.0 - (y / f - c).abs())
        })
        .collect()
}

/// A random (nout, nin) matrix with orthonormal rows (nout ≤ nin) or columns (nout > nin),
/// times `scale`, reshaped to `shape`. MXNet takes numpy's SVD factor; mxfn takes the Q of a
/// Householder QR with R's diagonal made positive — an orthonormal basis of the same space,
/// Haar-distributed for normal draws, at a fraction of the SVD's cost.
fn orthogonal(
    name: &str,
    shape: &[usize],
    dt: crate::tensor::DType,
    scale: f64,
    rand: RandType,
) -> Result<NDArray> {
    let Some(&nout) = shape.first() else {
        return Err(Error::invalid(
            format!("initializer.orthogonal: parameter \"{name}\""),
            "a weight with at least 1 dimension",
            "a scalar",
        ));
    };
    let nin: usize = shape[1..].iter().product();
    let tmp = match rand {
        RandType::Uniform => random::sample_f64(nout * nin, &Uniform::new(-1.0, 1.0)),
        RandType::Normal => {
            let d = Normal::new(0.0, 1.0).map_err(|e| Error::Msg(format!("internal: {e}")))?;
            random::sample_f64(nout * nin, &d)
        }
    };
    let mut out = vec![0.0; nout * nin];
    if nout >= nin {
        // Columns of tmp (nout × nin) → Q (nout × nin).
        let cols: Vec<Vec<f64>> = (0..nin)
            .map(|j| (0..nout).map(|i| tmp[i * nin + j]).collect())
            .collect();
        let q = thin_q(cols, nout);
        for (j, col) in q.iter().enumerate() {
            for (i, v) in col.iter().enumerate() {
                out[i * nin + j] = v * scale;
            }
        }
    } else {
        // Columns of tmpᵀ are the rows of tmp; Q of tmpᵀ (nin × nout) transposed → W.
        let cols: Vec<Vec<f64>> = tmp.chunks(nin.max(1)).map(|r| r.to_vec()).collect();
        let q = thin_q(cols, nin);
        for (i, col) in q.iter().enumerate() {
            for (j, v) in col.iter().enumerate() {
                out[i * nin + j] = v * scale;
            }
        }
    }
    NDArray::from_f64_slice(shape, &out, dt)
}

/// The thin Q (as n columns of length m, m ≥ n) of a Householder QR of the matrix given by
/// its columns, each column's sign chosen so that R has a non-negative diagonal.
fn thin_q(mut a: Vec<Vec<f64>>, m: usize) -> Vec<Vec<f64>> {
    let n = a.len();
    let mut vs: Vec<Vec<f64>> = Vec::with_capacity(n);
    let mut signs = vec![1.0; n];
    let reflect = |v: &[f64], k: usize, col: &mut Vec<f64>| {
        let dot: f64 = v.iter().zip(&col[k..]).map(|(a, b)| a * b).sum();
        for (c, vi) in col[k..].iter_mut().zip(v) {
            *c -= 2.0 * dot * vi;
        }
    };
    let par = m * n >= crate::kernels::par::SERIAL_BELOW / 4;
    for k in 0..n {
        let x = &a[k][k..];
        let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
        let x0 = x.first().copied().unwrap_or(0.0);
        let alpha = if x0 >= 0.0 { -norm } else { norm };
        let mut v = x.to_vec();
        if let Some(v0) = v.first_mut() {
            *v0 -= alpha;
        }
        let vn = v.iter().map(|t| t * t).sum::<f64>().sqrt();
        if vn > 0.0 {
            v.iter_mut().for_each(|t| *t /= vn);
            let (_, rest) = a.split_at_mut(k);
            if par {
                rest.par_iter_mut().for_each(|col| reflect(&v, k, col));
            } else {
                rest.iter_mut().for_each(|col| reflect(&v, k, col));
            }
        }
        // R[k][k] = alpha (or 0 for a zero column); flip Q's column to make it positive.
        signs[k] = if alpha < 0.0 { -1.0 } else { 1.0 };
        vs.push(v);
    }
    let mut q: Vec<Vec<f64>> = (0..n)
        .map(|j| {
            let mut e = vec![0.0; m];
            e[j] = 1.0;
            e
        })
        .collect();
    for k in (0..n).rev() {
        let v = &vs[k];
        if v.iter().all(|&t| t == 0.0) {
            continue;
        }
        if par {
            q.par_iter_mut().for_each(|col| reflect(v, k, col));
        } else {
            q.iter_mut().for_each(|col| reflect(v, k, col));
        }
    }
    for (col, s) in q.iter_mut().zip(&signs) {
        col.iter_mut().for_each(|t| *t *= s);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    #[test]
    fn fans_follow_mxnet() {
        assert_eq!(fans(&[32, 16, 3, 3]), Some((144.0, 288.0)));
        assert_eq!(fans(&[10, 784]), Some((784.0, 10.0)));
        assert_eq!(fans(&[5]), None);
    }

    #[test]
    fn thin_q_is_orthonormal() {
        let a = vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 7.0]];
        let q = thin_q(a, 3);
        for i in 0..2 {
            for j in 0..2 {
                let d: f64 = q[i].iter().zip(&q[j]).map(|(x, y)| x * y).sum();
                assert!((d - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12);
            }
        }
        // R's diagonal is positive: the first column of Q points along the first column of A.
        assert!(q[0][0] > 0.0);
    }

    #[test]
    fn bilinear_kernel_is_separable_tent() {
        let v = bilinear(&[1, 1, 4, 4]);
        assert_eq!(v[0], 0.0625);
        assert_eq!(v[5], 0.5625);
    }

    #[test]
    fn lstm_bias_sets_forget_gate() {
        let b = Initializer::LstmBias { forget_bias: 1.0 }
            .init_weight("b", &NDArray::zeros(&[8], DType::Float32))
            .unwrap();
        assert_eq!(b.to_f64_vec(), vec![0., 0., 1., 1., 0., 0., 0., 0.]);
    }
}
