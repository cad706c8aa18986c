//! AdamW, the warmup + cosine learning-rate schedule, and global-norm gradient clipping.
//!
//! Written here rather than taken from candle-nn because a checkpoint must carry the moment
//! estimates, and candle-nn's optimiser keeps them private.

use candle_core::{Tensor, Var};

use crate::error::Result;
use crate::model::Weights;

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AdamWParams {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// A trainable tensor with its AdamW moments.
#[derive(Debug)]
pub(crate) struct Param {
    pub name: String,
    pub var: Var,
    pub m: Tensor,
    pub v: Tensor,
    /// Weight decay applies to matrices only, never to norms or biases.
    pub decay: bool,
}

/// AdamW over named variables, with the step count used for bias correction.
#[derive(Debug)]
pub(crate) struct AdamW {
    pub params: Vec<Param>,
    pub hp: AdamWParams,
    pub step: usize,
}

impl AdamW {
    /// Wraps `vars` with zero moments.
    pub fn new(vars: Vec<(String, Var)>, hp: AdamWParams) -> Result<Self> {
        let params = vars
            .into_iter()
            .map(|(name, var)| {
                let zeros = var.as_tensor().zeros_like()?;
                let decay = var.as_tensor().rank() >= 2;
                Ok(Param {
                    name,
                    m: zeros.clone(),
                    v: zeros,
                    var,
                    decay,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            params,
            hp,
            step: 0,
        })
    }

    /// Applies one update with learning rate `lr` and gradients `grads` (same order as params).
    pub fn update(&mut self, grads: &[Tensor], lr: f64) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = (self.hp.beta1, self.hp.beta2);
        let c1 = 1.0 - b1.powi(t);
        let c2 = 1.0 - b2.powi(t);
        for (p, g) in self.params.iter_mut().zip(grads) {
            p.m = ((&p.m * b1)? + (g * (1.0 - b1))?)?;
            p.v = ((&p.v * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let mhat = (&p.m / c1)?;
            let vhat = (&p.v / c2)?;
            let upd = mhat.div(&(vhat.sqrt()? + self.hp.eps)?)?;
            let w = p.var.as_tensor();
            let decayed = if p.decay && self.hp.weight_decay > 0.0 {
                (w * (1.0 - lr * self.hp.weight_decay))?
            } else {
                w.clone()
            };
            let next = (decayed - (upd * lr)?)?;
            p.var.set(&next.detach())?;
        }
        Ok(())
    }

    /// Moment estimates as named tensors (`exp_avg.NAME`, `exp_avg_sq.NAME`) for a checkpoint.
    pub fn state(&self) -> Weights {
        let mut out = Weights::new();
        for p in &self.params {
            out.insert(format!("exp_avg.{}", p.name), p.m.clone());
            out.insert(format!("exp_avg_sq.{}", p.name), p.v.clone());
        }
        out
    }

    /// Restores moments saved by [`AdamW::state`]; returns the first missing name, if any.
    pub fn restore(&mut self, state: &Weights, step: usize) -> std::result::Result<(), String> {
        for p in &mut self.params {
            let (km, kv) = (
                format!("exp_avg.{}", p.name),
                format!("exp_avg_sq.{}", p.name),
            );
            match (state.get(&km), state.get(&kv)) {
                (Some(m), Some(v)) if m.dims() == p.m.dims() && v.dims() == p.v.dims() => {
                    p.m = m.clone();
                    p.v = v.clone();
                }
                _ => return Err(km),
            }
        }
        self.step = step;
        Ok(())
    }
}

/// Learning rate at `step` (1-based): linear warmup over `warmup` steps to `peak`, then a
/// cosine decay to `min` at `total`.
pub fn lr_at(step: usize, total: usize, warmup: usize, peak: f64, min: f64) -> f64 {
    if warmup > 0 && step <= warmup {
        return peak * step as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let progress = ((step - warmup.min(step)) as f64 / span).clamp(0.0, 1.0);
    min + 0.5 * (peak - min) * (1.0 + (std::f64::consts::PI * progress).cos())
}

/// Global L2 norm of `grads`.
pub(crate) fn global_norm(grads: &[Tensor]) -> Result<f64> {
    let mut total = 0f64;
    for g in grads {
        total += g.sqr()?.sum_all()?.to_scalar::<f32>()? as f64;
    }
    Ok(total.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn schedule_warms_up_then_decays_to_min() {
        assert!((lr_at(1, 100, 10, 1.0, 0.1) - 0.1).abs() < 1e-12);
        assert!((lr_at(10, 100, 10, 1.0, 0.1) - 1.0).abs() < 1e-12);
        assert!((lr_at(100, 100, 10, 1.0, 0.1) - 0.1).abs() < 1e-12);
        let mid = lr_at(55, 100, 10, 1.0, 0.1);
        assert!((mid - 0.55).abs() < 1e-9, "{mid}");
        assert!(lr_at(30, 100, 10, 1.0, 0.1) > lr_at(60, 100, 10, 1.0, 0.1));
        assert!((lr_at(1, 1, 0, 2.0, 0.0) - 0.0).abs() < 1e-12);
    }

    #[test]
    fn adamw_first_step_moves_each_weight_by_lr_against_the_gradient_sign() {
        let var = Var::from_vec(vec![1.0f32, -2.0, 3.0, 0.5], (2, 2), &Device::Cpu).unwrap();
        let hp = AdamWParams {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let mut opt = AdamW::new(vec![("w".into(), var.clone())], hp).unwrap();
        let g = Tensor::from_vec(vec![0.5f32, -0.1, 2.0, -3.0], (2, 2), &Device::Cpu).unwrap();
        opt.update(&[g], 0.01).unwrap();
        let got = var
            .as_tensor()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let expect = [0.99f32, -1.99, 2.99, 0.51];
        for (a, b) in got.iter().zip(expect) {
            assert!((a - b).abs() < 1e-5, "{got:?}");
        }
        assert_eq!(opt.step, 1);
        let n = global_norm(&[Tensor::new(&[3f32, 4.0], &Device::Cpu).unwrap()]).unwrap();
        assert!((n - 5.0).abs() < 1e-9);
    }
}
