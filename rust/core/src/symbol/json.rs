//! MXNet's symbol JSON (`-symbol.json`, `Symbol.tojson()`): reading, including the
//! pre-1.0 layouts MXNet 1.9.1 upgrades on load.

use super::{Entry, Node, Symbol};
use crate::error::{Error, Result};
use crate::ops;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

fn bad(msg: impl Into<String>) -> Error {
    Error::format("symbol JSON", msg)
}

fn attr_map(v: Option<&Value>) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if let Some(Value::Object(o)) = v {
        for (k, v) in o {
            let s = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            m.insert(k.clone(), s);
        }
    }
    m
}

/// Parses MXNet symbol JSON into a symbol.
pub fn load_json(text: &str) -> Result<Symbol> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let nodes_v = root
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"nodes\" list"))?;
    let mut nodes: Vec<Arc<Node>> = Vec::with_capacity(nodes_v.len());
    for (i, nv) in nodes_v.iter().enumerate() {
        let op = nv
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("node {i}: no \"op\"")))?;
        let name = nv
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("node {i}: no \"name\"")))?;
        // `attr` and `attrs` fill one map (the later key in the node wins); `param` adds
        // operator parameters without overriding.
        let mut attrs = BTreeMap::new();
        if let Value::Object(o) = nv {
            for (k, v) in o {
                if k == "attr" || k == "attrs" {
                    attrs = attr_map(Some(v));
                }
            }
        }
        for (k, v) in attr_map(nv.get("param")) {
            attrs.entry(k).or_insert(v);
        }
        let mut inputs = Vec::new();
        for e in nv
            .get("inputs")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            let parts = e
                .as_array()
                .ok_or_else(|| bad(format!("node {i} ({name}): an input is not a list")))?;
            let idx = parts
                .first()
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(format!("node {i} ({name}): bad input entry {e}")))?
                as usize;
            let out = parts.get(1).and_then(Value::as_u64).unwrap_or(0) as usize;
            let version = parts.get(2).and_then(Value::as_u64).unwrap_or(0) as u32;
            let node = nodes.get(idx).cloned().ok_or_else(|| {
                bad(format!(
                    "node {i} ({name}): input refers to node {idx}, which does not come before it"
                ))
            })?;
            inputs.push(Entry {
                node,
                index: out,
                version,
            });
        }
        let node = if op == "null" {
            Node::new(None, None, name.to_string(), attrs, vec![])
        } else {
            let def = ops::lookup(op)?;
            let inst = def.instantiate(name, &attrs)?;
            let want = inst.arguments().len() + inst.aux_states().len();
            if inputs.len() != want {
                return Err(bad(format!(
                    "node {i} ({name}): {op} takes {want} inputs, the file gives {}",
                    inputs.len()
                )));
            }
            Node::new(Some(def), Some(inst), name.to_string(), attrs, inputs)
        };
        nodes.push(node);
    }
    let heads_v = root
        .get("heads")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no \"heads\" list"))?;
    let mut heads = Vec::new();
    for h in heads_v {
        let parts = h.as_array().ok_or_else(|| bad(format!("bad head {h}")))?;
        let idx = parts
            .first()
            .and_then(Value::as_u64)
            .ok_or_else(|| bad(format!("bad head {h}")))? as usize;
        let node = nodes
            .get(idx)
            .cloned()
            .ok_or_else(|| bad(format!("head refers to missing node {idx}")))?;
        let index = parts.get(1).and_then(Value::as_u64).unwrap_or(0) as usize;
        if index >= node.num_outputs() {
            return Err(bad(format!(
                "head refers to output {index} of node {}, which has {}",
                node.name,
                node.num_outputs()
            )));
        }
        heads.push(Entry {
            node,
            index,
            version: parts.get(2).and_then(Value::as_u64).unwrap_or(0) as u32,
        });
    }
    Ok(Symbol { heads })
}
