//! A metric's accumulated counts as plain numbers, and merging another worker's into it: how
//! data-parallel training reports one global metric (the values pooled over workers).

use super::*;

impl EvalMetric {
    /// The accumulated state as numbers: the local and global sums and what some kinds keep
    /// beyond them (confusion counts, moments). Data-parallel training gathers every worker's
    /// state and [merges](Self::merge_state) them into the global metric.
    ///
    /// ```
    /// use mxfn_core::metric::EvalMetric;
    /// use mxfn_core::NDArray;
    /// let mut a = EvalMetric::create("acc", &serde_json::Value::Null).unwrap();
    /// let l = NDArray::from_f32(&[2], vec![1.0, 0.0]).unwrap();
    /// let p = NDArray::from_f32(&[2, 2], vec![0.2, 0.8, 0.9, 0.1]).unwrap();
    /// a.update(&[l.clone()], &[p.clone()]).unwrap();
    /// let mut b = a.clone();
    /// b.update(&[l], &[NDArray::from_f32(&[2, 2], vec![0.9, 0.1, 0.9, 0.1]).unwrap()]).unwrap();
    /// a.merge_state(&b.state()).unwrap();
    /// assert_eq!(a.get()[0].1, 5.0 / 6.0);
    /// ```
    pub fn state(&self) -> Vec<f64> {
        let mut v = vec![
            self.local.sum,
            self.local.num,
            self.global.sum,
            self.global.num,
        ];
        match &self.kind {
            Kind::F1 { local, global, .. } | Kind::Mcc { local, global, .. } => {
                for b in [local, global] {
                    v.extend([b.tp, b.fp, b.fn_, b.tn]);
                }
            }
            Kind::Pearson { local, global, .. } => {
                for w in [local, global] {
                    v.extend([w.n, w.mean_l, w.sse_l, w.mean_p, w.sse_p, w.cov]);
                }
            }
            Kind::Pcc { local, global } => {
                for c in [local, global] {
                    v.push(c.k as f64);
                    v.extend(&c.m);
                }
            }
            Kind::Composite(children) => {
                for c in children {
                    let s = c.state();
                    v.push(s.len() as f64);
                    v.extend(s);
                }
            }
            _ => {}
        }
        v
    }

    /// Adds another worker's [`state`](Self::state) of the same metric to this one, as if
    /// this metric had also seen that worker's batches. A state of another shape is an error.
    pub fn merge_state(&mut self, state: &[f64]) -> Result<()> {
        let bad = |name: &str| {
            Error::invalid(
                format!("{name}.merge_state: state"),
                "the state() of the same metric on another worker",
                format!("{} numbers that do not fit", state.len()),
            )
        };
        let name = self.name.clone();
        let mut it = state.iter().copied();
        let mut take = |n: usize| -> Result<Vec<f64>> {
            let v: Vec<f64> = it.by_ref().take(n).collect();
            if v.len() == n {
                Ok(v)
            } else {
                Err(bad(&name))
            }
        };
        let sums = take(4)?;
        let (other_local, other_global) = (
            Sums {
                sum: sums[0],
                num: sums[1],
            },
            Sums {
                sum: sums[2],
                num: sums[3],
            },
        );
        let tag = self.kind_name();
        let mut derived: Option<(Sums, Sums)> = None;
        match &mut self.kind {
            Kind::F1 {
                average,
                local,
                global,
            }
            | Kind::Mcc {
                average,
                local,
                global,
            } => {
                for b in [&mut *local, &mut *global] {
                    let x = take(4)?;
                    b.add(&Binary {
                        tp: x[0],
                        fp: x[1],
                        fn_: x[2],
                        tn: x[3],
                    });
                }
                if *average == Average::Micro {
                    let sums = |b: &Binary| Sums::weighted(b.score(tag), b.total());
                    derived = Some((sums(local), sums(global)));
                }
            }
            Kind::Pearson { local, global, .. } => {
                for w in [local, global] {
                    let x = take(6)?;
                    w.merge(&Welford {
                        n: x[0],
                        mean_l: x[1],
                        sse_l: x[2],
                        mean_p: x[3],
                        sse_p: x[4],
                        cov: x[5],
                    });
                }
            }
            Kind::Pcc { local, global } => {
                for c in [&mut *local, &mut *global] {
                    let k = take(1)?[0];
                    if !(k >= 0.0 && k.fract() == 0.0 && k <= 1e6) {
                        return Err(bad(&name));
                    }
                    let k = k as usize;
                    c.add(&Confusion { k, m: take(k * k)? });
                }
                // One instance per update call on any worker; the value is the MCC of the
                // summed matrix.
                let (ln, gn) = (
                    self.local.num + other_local.num,
                    self.global.num + other_global.num,
                );
                derived = Some((
                    Sums::weighted(local.mcc(), ln),
                    Sums::weighted(global.mcc(), gn),
                ));
            }
            Kind::Composite(children) => {
                for c in children.iter_mut() {
                    let n = take(1)?[0];
                    if !(n >= 0.0 && n.fract() == 0.0 && n as usize <= state.len()) {
                        return Err(bad(&name));
                    }
                    c.merge_state(&take(n as usize)?)?;
                }
            }
            _ => {}
        }
        if it.next().is_some() {
            return Err(bad(&name));
        }
        match derived {
            Some((l, g)) => {
                self.local = l;
                self.global = g;
            }
            None => {
                self.local.add(other_local.sum, other_local.num);
                self.global.add(other_global.sum, other_global.num);
            }
        }
        Ok(())
    }
}
