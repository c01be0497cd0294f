//! The speed options on the CPU: --channels-last and --amp bf16 train correctly, the
//! options parse, and they reach `train` and `test` with the model. One test function:
//! the steps draw from torch's process-wide generator, so they run in order in this
//! test binary of their own.
use clap::Parser;
use labkit::perf::{self, Amp, PerfSettings};
use labkit::{
    DataLoader, LoaderOptions, Model, ModelSettings, Norm, RandomSampler, SequentialSampler, WideResNet,
    Widths,
};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};

const BATCHES_OF_16: LoaderOptions = LoaderOptions { batch_size: 16, device: Device::Cpu };

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: labkit::RunOptions,
}

fn settings(amp: Amp, channels_last: bool) -> PerfSettings {
    PerfSettings {
        amp,
        channels_last,
        widths: Widths::NARROW,
        peak_tflops: None,
        gpu_allowed: false,
        ..Default::default()
    }
}

fn model(seed: u64, perf: PerfSettings) -> (nn::VarStore, WideResNet) {
    let vs = nn::VarStore::new(Device::Cpu);
    let perf = PerfSettings { widths: Widths([4, 8, 8, 8]), ..perf };
    let net = WideResNet::new(&vs.root(), ModelSettings { seed: Some(seed), perf }, Norm::BatchNorm);
    (vs, net)
}

/// A tiny learnable split: the label is written into the image as its brightness.
fn split(n: usize) -> labkit::data::Split {
    let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
    let pixels: Vec<u8> = labels.iter().flat_map(|&l| std::iter::repeat_n(l * 25, 784)).collect();
    labkit::data::Split::from_raw(&pixels, &labels)
}

#[test]
fn speed_options_on_cpu() {
    // Options: parsed into RunOptions; bad values refused with a reason.
    let cli = Cli::try_parse_from(["lab", "--amp", "bf16", "--channels-last", "--peak-tflops", "5"]).unwrap();
    assert_eq!(cli.run.amp, Amp::Bf16);
    assert!(cli.run.channels_last);
    assert_eq!(cli.run.peak_tflops, Some(5.0));
    let defaults = Cli::try_parse_from(["lab"]).unwrap();
    assert_eq!(
        (defaults.run.amp, defaults.run.channels_last, defaults.run.peak_tflops),
        (Amp::Off, false, None)
    );
    let err = Cli::try_parse_from(["lab", "--amp", "fp16"]).err().unwrap().to_string();
    assert!(err.contains("bf16"), "{err}");
    assert!(Cli::try_parse_from(["lab", "--peak-tflops", "0"]).is_err());

    // The options travel with the model built from them, and so to train and test.
    let vs = nn::VarStore::new(Device::Cpu);
    let cli =
        Cli::try_parse_from(["lab", "--amp", "bf16", "--channels-last", "--width", "narrow", "--seed", "3"])
            .unwrap();
    let net = WideResNet::new(&vs.root(), &cli.run, Norm::BatchNorm);
    assert_eq!(Model::perf(&net), cli.run.perf());
    assert_eq!(
        (net.perf().amp, net.perf().channels_last, net.perf().widths),
        (Amp::Bf16, true, Widths::NARROW)
    );
    // --seed seeds the initial weights: the same seed, the same model.
    let again = nn::VarStore::new(Device::Cpu);
    let _ = WideResNet::new(&again.root(), &cli.run, Norm::BatchNorm);
    let first = &vs.variables()["fc.weight"];
    assert!(first.equal(&again.variables()["fc.weight"]), "--seed did not fix the initial weights");

    // Channels-last: NHWC weights, the same function as the plain model.
    let (_, plain) = model(5, settings(Amp::Off, false));
    let (vs_cl, nhwc) = model(5, settings(Amp::Off, true));
    let w = &vs_cl.variables()["block3.cbr1.conv.weight"];
    assert_eq!(w.size(), vec![8, 8, 3, 3]);
    assert_eq!(w.stride(), vec![72, 1, 24, 8], "NHWC strides");
    let x = Tensor::rand([3, 1, 28, 28], (Kind::Float, Device::Cpu));
    let a = plain.forward_t(&x, false);
    let b = nhwc.forward_t(&perf::to_channels_last(&x), false);
    assert!(a.allclose(&b, 1e-4, 1e-5, false), "channels-last changes the result");

    // bf16 autocast on the CPU: a training epoch runs, the parameters stay float32 and
    // move, and validation gives finite float metrics.
    let (vs, net) = model(7, settings(Amp::Bf16, true));
    let before: Vec<Tensor> = vs.trainable_variables().iter().map(|t| t.copy()).collect();
    let mut opt = nn::Sgd::default().build(&vs, 0.05).unwrap();
    let data = split(64);
    let mut train_loader = DataLoader::new(&data, RandomSampler::new(data.len()), BATCHES_OF_16);
    labkit::train(&net, &mut opt, &mut train_loader).unwrap();
    let after = vs.trainable_variables();
    assert!(after.iter().all(|t| t.kind() == Kind::Float));
    assert!(before.iter().zip(&after).any(|(b, a)| !b.equal(a)), "training changed nothing");
    let mut test_loader = DataLoader::new(&data, SequentialSampler::new(data.len()), BATCHES_OF_16);
    let (accuracy, loss) = labkit::test(&net, &mut test_loader).unwrap();
    assert!((0.0..=1.0).contains(&accuracy));
    assert!(loss.is_finite() && loss > 0.0, "{loss}");
    // The model's settings are what train runs under: the same start, the same data and
    // the same dropout draws train to other weights with bf16 than without.
    let trained = |amp| {
        let (vs, net) = model(9, settings(amp, false));
        let mut opt = nn::Sgd::default().build(&vs, 0.05).unwrap();
        let mut loader = DataLoader::new(&data, SequentialSampler::new(data.len()), BATCHES_OF_16);
        tch::manual_seed(10);
        labkit::train(&net, &mut opt, &mut loader).unwrap();
        vs.variables()["fc.weight"].copy()
    };
    let gap = |a: &Tensor, b: &Tensor| (a - b).abs().max().double_value(&[]);
    let plain = trained(Amp::Off);
    let (repeat, bf16) = (gap(&plain, &trained(Amp::Off)), gap(&plain, &trained(Amp::Bf16)));
    eprintln!("fc.weight after an epoch: plain twice {repeat:.1e} apart, plain and bf16 {bf16:.1e}");
    assert!(repeat < 1e-6, "a plain epoch does not repeat: {repeat:e}");
    assert!(bf16 > 1e-4, "--amp bf16 did not reach train: {bf16:e} from the plain epoch");
    // The region ended: plain float32 again outside train/test.
    let y = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
    assert_eq!(y.matmul(&y).kind(), Kind::Float);

    // The MFU line is printed only when a peak is known: none on a CPU run without one.
    assert_eq!(net.perf().mfu_line(100.0), None);
    let with_peak = PerfSettings { peak_tflops: Some(1.0), ..settings(Amp::Off, false) };
    let line = with_peak.mfu_line(1000.0).unwrap();
    // 3 × 38,649,344 FLOP × 1000 images/s = 0.116 TFLOP/s of 1: 11.6%.
    assert!(line.starts_with("Model FLOP utilisation: 11.6%"), "{line}");
}
