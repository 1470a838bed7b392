//! `--plot FILE.svg`: the latency percentile curve of each run, drawn with plotters.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// x of a percentile on the "nines" axis: 0 = p0, 1 = p90, 2 = p99, 3 = p99.9.
pub fn nines(percentile: f64) -> f64 {
    let rest = (1.0 - percentile / 100.0).max(1e-6);
    -rest.log10()
}

/// `series`: (run name, [(percentile 0..100, latency µs)]).
pub fn percentile_svg(
    path: &Path,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let points: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, pts)| {
            let v = pts
                .iter()
                .map(|&(p, us)| (nines(p), (us / 1000.0).max(1e-3)))
                .collect();
            (name.clone(), v)
        })
        .filter(|(_, v): &(String, Vec<(f64, f64)>)| !v.is_empty())
        .collect();
    let x_max = points
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.0))
        .fold(3.0f64, f64::max)
        .min(6.0);
    let y_max = points
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(0.01f64, f64::max);
    let y_min = points
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(y_max, f64::min)
        .max(1e-3);
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, (y_min * 0.8..y_max * 1.25).log_scale())
        .map_err(|e| anyhow!("plot: {e}"))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms)")
        .x_labels(8)
        .x_label_formatter(&|x| {
            let p = 100.0 * (1.0 - 10f64.powf(-x));
            format!("p{p:.4}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_owned()
        })
        .draw()
        .map_err(|e| anyhow!("plot: {e}"))?;
    for (i, (name, v)) in points.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(v.iter().copied(), color.stroke_width(2)))
            .map_err(|e| anyhow!("plot: {e}"))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("plot: {e}"))?;
    root.present().map_err(|e| anyhow!("plot: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_axis() {
        assert!((nines(0.0) - 0.0).abs() < 1e-9);
        assert!((nines(90.0) - 1.0).abs() < 1e-9);
        assert!((nines(99.9) - 3.0).abs() < 1e-9);
        assert!(nines(100.0) <= 6.0 + 1e-9);
    }

    #[test]
    fn draws_an_svg() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        let series = vec![(
            "produce".to_owned(),
            vec![
                (0.0, 100.0),
                (50.0, 150.0),
                (99.0, 400.0),
                (99.9, 900.0),
                (100.0, 1500.0),
            ],
        )];
        percentile_svg(&path, "test", &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") || svg.contains("<svg"));
        assert!(svg.contains("polyline") || svg.contains("path"));
    }
}
