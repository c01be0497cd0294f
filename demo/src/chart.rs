//! The scaling chart: measured images/sec per world size against ideal linear scaling,
//! as SVG (text as SVG text, no font needed) and PNG (text rendered from a TTF font:
//! DejaVu Sans, embedded, or `--font`).
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::Row;

/// DejaVu Sans (Bitstream Vera licence: demo/fonts/LICENSE-DejaVu.txt), in the binary:
/// GPU nodes often have no fonts installed, and the chart must render there.
const EMBEDDED_FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// Registers a TTF font as plotters' "sans-serif" for bitmap output: `explicit`, or the
/// embedded DejaVu Sans.
pub fn register_font(explicit: Option<&Path>) -> Result<(), String> {
    let (bytes, name): (&'static [u8], String) = match explicit {
        Some(path) => {
            let bytes =
                std::fs::read(path).map_err(|e| format!("cannot read the font {}: {e}", path.display()))?;
            // plotters keeps the font for the whole process, so it must be 'static.
            (Box::leak(bytes.into_boxed_slice()), path.display().to_string())
        }
        None => (EMBEDDED_FONT, "the embedded DejaVu Sans".to_string()),
    };
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{name} is not a usable TTF font"))
}

pub fn write_svg(path: &Path, rows: &[Row], title: &str) -> Result<(), String> {
    let area = SVGBackend::new(path, (800, 500)).into_drawing_area();
    draw(&area, rows, title).map_err(|e| format!("drawing {}: {e}", path.display()))?;
    area.present().map_err(|e| format!("writing {}: {e}", path.display()))
}

pub fn write_png(path: &Path, rows: &[Row], title: &str) -> Result<(), String> {
    let area = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    draw(&area, rows, title).map_err(|e| format!("drawing {}: {e}", path.display()))?;
    area.present().map_err(|e| format!("writing {}: {e}", path.display()))
}

type DrawResult<T, DB> = Result<T, DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, rows: &[Row], title: &str) -> DrawResult<(), DB> {
    area.fill(&WHITE)?;
    let max_ws = rows.iter().map(|r| r.world_size).max().unwrap_or(1) as f64;
    let base = rows.iter().find(|r| r.world_size == 1).map(|r| r.images_per_sec);
    let ideal = |ws: f64| base.map(|b| b * ws);
    let top = rows
        .iter()
        .map(|r| r.images_per_sec.max(ideal(r.world_size as f64).unwrap_or(0.0)))
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5..max_ws + 0.5, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("ranks (world size)")
        .y_desc("images/sec")
        .x_labels(rows.len().max(2) + 1)
        .x_label_formatter(&|x| if x.fract() == 0.0 { format!("{x:.0}") } else { String::new() })
        .draw()?;
    if base.is_some() {
        chart
            .draw_series(LineSeries::new(
                [1.0, max_ws].iter().map(|&ws| (ws, ideal(ws).unwrap_or(0.0))),
                ShapeStyle { color: RGBAColor(120, 120, 120, 1.0), filled: false, stroke_width: 2 },
            ))?
            .label("ideal (linear from 1 rank)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(120, 120, 120)));
    }
    let points: Vec<(f64, f64)> = rows.iter().map(|r| (r.world_size as f64, r.images_per_sec)).collect();
    chart
        .draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(3)))?
        .label("measured")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(3)));
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 5, BLUE.filled())))?;
    chart.draw_series(rows.iter().map(|r| {
        // Anchored at the point, drawn a little right of and above it.
        EmptyElement::at((r.world_size as f64, r.images_per_sec))
            + Text::new(
                format!("{:.0} img/s, {:.0}%", r.images_per_sec, r.efficiency * 100.0),
                (10, -20),
                ("sans-serif", 15).into_font(),
            )
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
