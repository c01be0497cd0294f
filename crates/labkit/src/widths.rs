//! The WideResNet's channel widths (`--width`) and which model is built (`--model`):
//! what the model is built from and what the FLOP count is computed from, in a module
//! of its own below both.
use std::fmt;
use std::str::FromStr;

/// Which model the lab's constructor builds (`--model`): the lab's WideResNet, or the
/// exact-comparison perceptron (`labkit::Mlp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Architecture {
    /// The lab's WideResNet.
    #[default]
    #[value(name = "wide-resnet")]
    WideResNet,
    /// The exact-comparison perceptron (labkit::Mlp).
    Mlp,
}

/// The exact-comparison perceptron's layer widths, input first (`labkit::Mlp::WIDTHS`).
pub const MLP_WIDTHS: [i64; 4] = [28 * 28, 128, 64, 10];

/// Channel widths of the four stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Widths(pub [i64; 4]);

impl Widths {
    /// The lab's model (17,117,466 parameters).
    pub const LAB: Widths = Widths([16, 160, 320, 640]);
    /// A CPU-friendly model with the same shape (173,778 parameters).
    pub const NARROW: Widths = Widths([8, 16, 32, 64]);
}

impl fmt::Display for Widths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.0;
        write!(f, "{a},{b},{c},{d}")
    }
}

impl FromStr for Widths {
    type Err = String;
    /// `lab`, `narrow`, or four comma-separated channel counts such as `8,16,32,64`.
    fn from_str(s: &str) -> Result<Widths, String> {
        match s {
            "lab" | "full" => return Ok(Widths::LAB),
            "narrow" => return Ok(Widths::NARROW),
            _ => {}
        }
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let values: Vec<i64> =
            parts.iter().filter_map(|p| p.parse().ok()).filter(|v| *v > 0 && *v <= 4096).collect();
        if parts.len() != 4 || values.len() != 4 {
            return Err(format!(
                "width {s:?} is not `lab`, `narrow`, or four channel counts 1..4096 like 8,16,32,64"
            ));
        }
        Ok(Widths([values[0], values[1], values[2], values[3]]))
    }
}
