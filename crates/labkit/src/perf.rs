//! Speed settings of a run (`--amp`, `--channels-last`, `--peak-tflops`), which
//! `train`, `test` and the model follow (recorded for the process by the `run` module);
//! and the model-FLOP utilisation (MFU) that rank 0 reports at the end.
use std::ffi::OsStr;
use std::fmt;
use std::str::FromStr;

use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::{Arg, Command, ValueEnum};

use tch::{Device, Tensor};

use crate::widths::{Architecture, Widths, MLP_WIDTHS};

/// Mixed precision: `off`, everything in float32 (the lab), or `bf16`, autocast:
/// convolutions and matrix products in bfloat16, parameters, gradients and the loss
/// in float32.
// No doc comments on the values: see `DatasetKind`'s note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
#[allow(missing_docs)]
pub enum Amp {
    #[default]
    #[value(alias = "none", alias = "fp32")]
    Off,
    #[value(alias = "bfloat16")]
    Bf16,
}

/// Why there is no `--amp fp16`, for whoever asks for it.
const FP16_LESSON: &str =
    "--amp fp16 is not offered: it needs a gradient scaler; use bf16 (same speed on tensor cores)";

fn is_fp16(s: &str) -> bool {
    matches!(s.to_ascii_lowercase().as_str(), "fp16" | "float16")
}

/// For text outside clap (and tests); `--amp` parses through [`AmpParser`].
impl FromStr for Amp {
    type Err = String;
    fn from_str(s: &str) -> Result<Amp, String> {
        if is_fp16(s) {
            return Err(FP16_LESSON.into());
        }
        <Amp as ValueEnum>::from_str(s, true)
            .map_err(|_| format!("unknown --amp `{s}`: expected {}", crate::parsers::one_of::<Amp>()))
    }
}

impl fmt::Display for Amp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::parsers::value_name(self))
    }
}

/// clap's parser of `--amp`: the `ValueEnum`'s (its values in `--help`, its error for
/// a typo), except that fp16 gets the reason it is missing rather than a list.
#[derive(Debug, Clone, Copy)]
pub struct AmpParser;

impl TypedValueParser for AmpParser {
    type Value = Amp;

    fn parse_ref(&self, cmd: &Command, arg: Option<&Arg>, value: &OsStr) -> Result<Amp, clap::Error> {
        if value.to_str().is_some_and(is_fp16) {
            // A plain function parser: clap's "invalid value 'fp16' for '--amp': <lesson>".
            let lesson = |_: &str| -> Result<Amp, &'static str> { Err(FP16_LESSON) };
            return lesson.parse_ref(cmd, arg, value);
        }
        EnumValueParser::<Amp>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Amp::value_variants().iter().filter_map(ValueEnum::to_possible_value)))
    }
}

/// The speed settings of a run, from its options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfSettings {
    /// Mixed precision: off, or bfloat16 autocast on CUDA.
    pub amp: Amp,
    /// Channels-last memory format for the model and the images.
    pub channels_last: bool,
    /// The model's channel widths.
    pub widths: Widths,
    /// Which model (`--model`): the WideResNet of [`widths`](Self::widths), or the
    /// exact-comparison perceptron.
    pub architecture: Architecture,
    /// Given with `--peak-tflops`; otherwise looked up by GPU name.
    pub peak_tflops: Option<f64>,
    /// Whether this run's ranks may use GPUs (`--device` is not `cpu`).
    pub gpu_allowed: bool,
}

impl Default for PerfSettings {
    fn default() -> Self {
        PerfSettings {
            amp: Amp::Off,
            channels_last: false,
            widths: Widths::LAB,
            architecture: Architecture::WideResNet,
            peak_tflops: None,
            gpu_allowed: true,
        }
    }
}

/// The same values in channels-last (NHWC) memory layout, for a 4-D tensor; others
/// unchanged. PyTorch tells the layout from the strides, and NCHW → NHWC → a view back
/// to NCHW leaves exactly channels-last strides (tch has no memory-format call).
pub fn to_channels_last(t: &Tensor) -> Tensor {
    if t.dim() != 4 {
        return t.shallow_clone();
    }
    t.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
}

/// Forward FLOPs for one 28×28 image, counted from the model's layers: 2 × the
/// multiply-adds of every convolution and of the linear layer. BatchNorm, ReLU,
/// pooling, dropout and the residual adds are left out (under 1% here, and the usual
/// convention for MFU). A training step costs about 3× this (backward ≈ 2× forward).
pub fn forward_flops_per_image(widths: Widths) -> u64 {
    let [w0, w1, w2, w3] = widths.0.map(|w| w as u64);
    // Pixels per channel at each stage: 28×28, then 14×14 and 7×7 after the max-pools.
    let stages = [(28 * 28, w0, w1), (14 * 14, w1, w2), (7 * 7, w2, w3)];
    let conv = |pixels: u64, cin: u64, cout: u64, k: u64| pixels * cin * cout * k * k;
    let mut macs = conv(28 * 28, 1, w0, 3); // the stem
    for (pixels, cin, cout) in stages {
        // A widening block: two 3×3 convs and a 1×1 shortcut; then a block of equal widths.
        macs += conv(pixels, cin, cout, 3) + conv(pixels, cout, cout, 3) + conv(pixels, cin, cout, 1);
        macs += 2 * conv(pixels, cout, cout, 3);
    }
    macs += w3 * 10; // the classifier
    2 * macs
}

/// Dense peak TFLOP/s of known GPUs by (part of) their name: (TF32 or FP32, BF16).
/// float32 runs count against the first: cuDNN convolutions use TF32 tensor cores by
/// default on Ampere and newer. T4 has neither TF32 nor BF16 tensor cores.
const PEAKS: [(&str, f64, Option<f64>); 5] = [
    ("H100 PCIe", 378.0, Some(756.0)),
    ("H100", 494.7, Some(989.4)),
    ("H200", 494.7, Some(989.4)),
    ("A100", 156.0, Some(312.0)),
    ("T4", 8.1, None),
];

/// The peak TFLOP/s of a GPU called `name` at this precision, when the table knows it.
pub fn peak_tflops(name: &str, amp: Amp) -> Option<f64> {
    let (_, fp32, bf16) = PEAKS.iter().find(|(key, _, _)| name.contains(key))?;
    match amp {
        Amp::Off => Some(*fp32),
        Amp::Bf16 => *bf16,
    }
}

/// The first GPU's name from nvidia-smi (tch does not expose device properties).
pub fn gpu_name() -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name", "--format=csv,noheader", "-i", "0"])
        .output()
        .ok()?;
    let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !name.is_empty()).then_some(name)
}

/// Model-FLOP utilisation: achieved training FLOP/s (3 × forward per image) over the peak.
pub fn mfu(images_per_sec_per_device: f64, widths: Widths, peak_tflops: f64) -> f64 {
    3.0 * forward_flops_per_image(widths) as f64 * images_per_sec_per_device / (peak_tflops * 1e12)
}

/// Forward FLOPs for one image through the exact-comparison perceptron: 2 × the
/// multiply-adds of its three linear layers.
pub fn mlp_forward_flops_per_image() -> u64 {
    2 * MLP_WIDTHS.windows(2).map(|w| (w[0] * w[1]) as u64).sum::<u64>()
}

impl PerfSettings {
    /// Forward FLOPs for one image through the model these settings build.
    pub fn forward_flops_per_image(&self) -> u64 {
        match self.architecture {
            Architecture::WideResNet => forward_flops_per_image(self.widths),
            Architecture::Mlp => mlp_forward_flops_per_image(),
        }
    }

    /// The line rank 0 prints after the summary, when a peak is known: `--peak-tflops`,
    /// or the table for the GPU this run used. None on CPU runs without `--peak-tflops`.
    pub fn mfu_line(&self, images_per_sec_per_device: f64) -> Option<String> {
        let s = self;
        let on_gpu = s.gpu_allowed && tch::Cuda::is_available();
        let (peak, source) = match s.peak_tflops {
            Some(p) => (p, "given with --peak-tflops".to_string()),
            None if on_gpu => {
                let name = gpu_name().unwrap_or_else(|| "unknown GPU".into());
                match peak_tflops(&name, s.amp) {
                    Some(p) => (p, format!("{name}, {}", if s.amp == Amp::Bf16 { "BF16" } else { "TF32" })),
                    None => {
                        return Some(format!(
                            "Model FLOP utilisation: unknown peak for {name} at amp {}: pass --peak-tflops",
                            s.amp
                        ))
                    }
                }
            }
            None => return None,
        };
        let flops = s.forward_flops_per_image();
        let utilisation = 3.0 * flops as f64 * images_per_sec_per_device / (peak * 1e12);
        Some(format!(
            "Model FLOP utilisation: {:.1}% ({:.3} GFLOP forward per image, × 3 for training, {:.1} images/sec per device, peak {peak} TFLOP/s: {source})",
            utilisation * 100.0,
            flops as f64 / 1e9,
            images_per_sec_per_device
        ))
    }

    /// The device to run under bf16 autocast: `device` with `--amp bf16`, else none.
    pub(crate) fn autocast_on(&self, device: Device) -> Option<Device> {
        (self.amp == Amp::Bf16).then_some(device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn narrow_forward_flops_by_hand() {
        // Multiply-adds at [8, 16, 32, 64]:
        // stem 28·28·1·8·9 = 56,448;
        // stage 1 (28·28): 8→16 3×3 903,168 + 16→16 3×3 1,806,336 + 1×1 shortcut 100,352
        //   + a second block 2 × 1,806,336 = 6,422,528;
        // stage 2 (14·14, widths doubled, pixels ÷ 4) and stage 3 (7·7): the same 6,422,528 each;
        // linear 64·10 = 640. Total 56,448 + 3 · 6,422,528 + 640 = 19,324,672; FLOPs = 2×.
        assert_eq!(forward_flops_per_image(Widths::NARROW), 38_649_344);
        // The perceptron's: 784·128 + 128·64 + 64·10 multiply-adds, whatever --width says.
        let mlp = PerfSettings { architecture: Architecture::Mlp, ..PerfSettings::default() };
        assert_eq!(mlp.forward_flops_per_image(), 2 * 109_184);
        assert_eq!(PerfSettings::default().forward_flops_per_image(), forward_flops_per_image(Widths::LAB));
    }

    #[test]
    fn lab_forward_flops_by_hand() {
        // [16, 160, 320, 640]: stem 784·16·9 = 112,896;
        // stage 1: 784·(16·160·9 + 160·160·9·3 + 16·160) = 784·716,800 = 561,971,200;
        // stage 2: 196·(160·320·9 + 320·320·9·3 + 160·320) = 196·3,276,800 = 642,252,800;
        // stage 3: 49·(320·640·9 + 640·640·9·3 + 320·640) = 49·13,107,200 = 642,252,800;
        // linear 6,400. Total 1,846,596,096 multiply-adds.
        assert_eq!(forward_flops_per_image(Widths::LAB), 2 * 1_846_596_096);
    }

    #[test]
    fn peaks_by_name_and_precision() {
        assert_eq!(peak_tflops("NVIDIA H100 80GB HBM3", Amp::Bf16), Some(989.4));
        assert_eq!(peak_tflops("NVIDIA H100 PCIe", Amp::Off), Some(378.0));
        assert_eq!(peak_tflops("NVIDIA H200", Amp::Off), Some(494.7));
        assert_eq!(peak_tflops("NVIDIA A100-SXM4-80GB", Amp::Bf16), Some(312.0));
        assert_eq!(peak_tflops("Tesla T4", Amp::Bf16), None);
        assert_eq!(peak_tflops("Tesla T4", Amp::Off), Some(8.1));
        assert_eq!(peak_tflops("Some CPU", Amp::Off), None);
    }

    #[test]
    fn mfu_is_training_flops_over_peak() {
        // Lab width: 3 × 3.693192192 GFLOP × 1000 images/s = 11.0796 TFLOP/s; of 100: 11.08%.
        let m = mfu(1000.0, Widths::LAB, 100.0);
        assert!((m - 0.110_795_765_76).abs() < 1e-9, "{m}");
    }

    #[test]
    fn amp_parsing() {
        assert_eq!("bf16".parse::<Amp>(), Ok(Amp::Bf16));
        assert_eq!("off".parse::<Amp>(), Ok(Amp::Off));
        assert!("fp16".parse::<Amp>().unwrap_err().contains("bf16"));
        assert!("int8".parse::<Amp>().is_err());
    }

    #[test]
    fn channels_last_keeps_values_and_changes_strides() {
        let x = Tensor::arange(2 * 3 * 4 * 5, (Kind::Float, Device::Cpu)).view([2, 3, 4, 5]);
        let y = to_channels_last(&x);
        assert_eq!(y.size(), x.size());
        assert!(y.equal(&x));
        // NHWC: the channel is the fastest-moving index.
        assert_eq!(y.stride(), vec![60, 1, 15, 3]);
    }
}
