//! Learning-rate schedule: linear warmup, then cosine decay (Loshchilov & Hutter
//! 2017, as nanoGPT's `get_lr`).

/// Cosine schedule with linear warmup over `steps` steps. Runs shorter than
/// their warmup use `warmup_steps = steps` (the caller clamps), so they still
/// reach the peak rate at their last step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cosine {
    pub lr: f32,
    pub min_lr: f32,
    pub warmup_steps: u64,
    pub steps: u64,
}

impl Cosine {
    /// Learning rate of step `step` (1-based): `lr·step/warmup` during warmup,
    /// then `min + ½(lr − min)(1 + cos(π·p))` with `p` going from 0 after warmup
    /// to 1 at the last step.
    pub fn at(&self, step: u64) -> f32 {
        if step <= self.warmup_steps {
            // in f64: lr·step first would overflow f32 for an lr near f32::MAX
            return (self.lr as f64 * step as f64 / self.warmup_steps as f64) as f32;
        }
        let span = self.steps.saturating_sub(self.warmup_steps);
        if span <= 1 {
            return self.lr;
        }
        let p = ((step - self.warmup_steps - 1) as f64 / (span - 1) as f64).min(1.0);
        (self.min_lr as f64 + 0.5 * (self.lr - self.min_lr) as f64 * (1.0 + (std::f64::consts::PI * p).cos())) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine() {
        let s = Cosine { lr: 1e-3, min_lr: 1e-4, warmup_steps: 10, steps: 110 };
        assert!((s.at(1) - 1e-4).abs() < 1e-9);
        assert!((s.at(10) - 1e-3).abs() < 1e-9);
        assert!((s.at(11) - 1e-3).abs() < 1e-9);
        assert!((s.at(110) - 1e-4).abs() < 1e-9);
        assert!((s.at(60) - 0.55e-3).abs() < 1e-5);
        let no_warmup = Cosine { lr: 1.0, min_lr: 0.0, warmup_steps: 0, steps: 1 };
        assert_eq!(no_warmup.at(1), 1.0);
        // an --lr near f32::MAX (which validation accepts) stays finite through the warm-up
        let big = Cosine { lr: 3e38, min_lr: 0.0, warmup_steps: 10, steps: 20 };
        assert!((1..=20).all(|t| big.at(t).is_finite()));
    }
}
