//! `loss.svg`: training and validation loss against steps (plotters).

use crate::error::{runtime, Result};
use plotters::prelude::*;
use std::path::Path;

/// Draw the curves into `path` (written atomically). Empty series are skipped.
pub fn plot_losses(path: &Path, title: &str, train: &[(u64, f32)], val: &[(u64, f32)]) -> Result<()> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| runtime(format!("cannot draw {}: {e}", path.display()));
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let all = train.iter().chain(val.iter());
        let x_max = all.clone().map(|p| p.0).max().unwrap_or(1).max(1);
        let finite = all.map(|p| p.1).filter(|v| v.is_finite());
        let (lo, hi) = finite.fold((f32::MAX, f32::MIN), |(a, b), v| (a.min(v), b.max(v)));
        let (lo, hi) = if lo > hi { (0.0, 1.0) } else { (lo, hi) };
        let pad = ((hi - lo) * 0.05).max(1e-3);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(0u64..x_max, (lo - pad)..(hi + pad))
            .map_err(|e| err(&e))?;
        chart.configure_mesh().x_desc("step").y_desc("loss").draw().map_err(|e| err(&e))?;
        if !train.is_empty() {
            chart
                .draw_series(LineSeries::new(train.iter().copied().filter(|p| p.1.is_finite()), &BLUE))
                .map_err(|e| err(&e))?
                .label("train")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE));
        }
        if !val.is_empty() {
            chart
                .draw_series(LineSeries::new(val.iter().copied().filter(|p| p.1.is_finite()), &RED))
                .map_err(|e| err(&e))?
                .label("validation")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
        }
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw().map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    crate::files::write_atomic(path, svg.as_bytes())
}
