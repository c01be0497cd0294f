//! Just enough SVG for the guide's figures: rectangles, lines and text on a white
//! card (legible on mdBook's dark themes too), written with fixed precision so that a
//! figure redrawn from the same data is byte for byte the same file.
use std::fmt::Write;

/// The colours of ranks 0 to 3: a light fill and a darker stroke of the same hue, the
/// palette of the hand-drawn figures as well.
pub const RANK_FILL: [&str; 4] = ["#dbe7f6", "#fde3cf", "#d9f0dc", "#f6d6d7"];
pub const RANK_STROKE: [&str; 4] = ["#2f6db5", "#d0661c", "#2e8b3e", "#b8383d"];
pub const INK: &str = "#222222";
pub const MUTED: &str = "#666666";

const STYLE: &str = "text { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; fill: #222222; }
    .title { font-size: 16px; font-weight: bold; }
    .head { font-size: 14px; font-weight: bold; }
    .body { font-size: 13px; }
    .small { font-size: 11px; fill: #666666; }
    .cell { font-size: 14px; text-anchor: middle; }
    .mono { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 13px; }";

/// An SVG document being drawn; [`Svg::finish`] returns its text.
pub struct Svg {
    width: f64,
    height: f64,
    body: String,
}

impl Svg {
    /// A `width` × `height` figure whose accessible name is `title`.
    pub fn new(width: f64, height: f64, title: &str) -> Svg {
        let mut svg = Svg { width, height, body: String::new() };
        let _ = writeln!(svg.body, "  <title>{}</title>", escape(title));
        svg.rect(0.5, 0.5, width - 1.0, height - 1.0, "fill=\"#ffffff\" stroke=\"#d0d0d0\" rx=\"8\"");
        svg
    }

    /// A rectangle; `attrs` are extra attributes (`fill`, `stroke`, …) as written.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, attrs: &str) {
        let _ = writeln!(
            self.body,
            "  <rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" {attrs}/>",
            num(x),
            num(y),
            num(w),
            num(h)
        );
    }

    /// A straight line.
    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, attrs: &str) {
        let _ = writeln!(
            self.body,
            "  <line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {attrs}/>",
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        );
    }

    /// Text with its baseline at `y`; `class` is one of the style's classes, `attrs`
    /// extra attributes (`text-anchor`, `fill`).
    pub fn text(&mut self, x: f64, y: f64, class: &str, attrs: &str, text: &str) {
        let attrs = if attrs.is_empty() { String::new() } else { format!(" {attrs}") };
        let _ = writeln!(
            self.body,
            "  <text x=\"{}\" y=\"{}\" class=\"{class}\"{attrs}>{}</text>",
            num(x),
            num(y),
            escape(text)
        );
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
             role=\"img\">\n  <style>\n    {STYLE}\n  </style>\n{body}</svg>\n",
            w = num(self.width),
            h = num(self.height),
            body = self.body
        )
    }
}

/// A coordinate with at most one decimal, without a trailing `.0`.
fn num(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_text_are_written_plainly() {
        assert_eq!(num(12.0), "12");
        assert_eq!(num(12.25), "12.2");
        let mut svg = Svg::new(10.0, 10.0, "a < b");
        svg.text(1.0, 2.0, "body", "", "x & y");
        let text = svg.finish();
        assert!(text.contains("<title>a &lt; b</title>"), "{text}");
        assert!(text.contains(">x &amp; y</text>"), "{text}");
    }
}
