//! The value parsers of the step programs' options: whole numbers in a range, a
//! learning rate, a peak TFLOP/s. Each error says what is expected and why, as clap
//! prints it after "invalid value". Below the options' modules, which all use them;
//! and the names of the options' `ValueEnum`s, for messages and `Display`.
use clap::ValueEnum;

/// The name clap knows `value` by (`--dataset generated`: "generated").
pub(crate) fn value_name<E: ValueEnum>(value: &E) -> String {
    value.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// The names of every value of `E`, for "expected …": "off or bf16", "real, generated or auto".
pub(crate) fn one_of<E: ValueEnum>() -> String {
    let names: Vec<String> = E::value_variants().iter().map(value_name).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// Value parser for `--peak-tflops`.
pub(crate) fn positive_tflops(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number of TFLOP/s")),
    }
}

/// Parses a whole number in `low..=high`, or says which range is allowed and why.
fn bounded(s: &str, low: usize, high: usize, what: &str) -> Result<usize, String> {
    let n: i128 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number; expected {what}, from {low} to {high}"))?;
    if n < low as i128 || n > high as i128 {
        return Err(format!("{n} is out of range; expected {what}, from {low} to {high}"));
    }
    Ok(n as usize)
}

/// Value parser for counts that must be at least 1 (batch size, epochs, --save-every).
///
/// ```
/// assert_eq!(labkit::positive("32"), Ok(32));
/// assert!(labkit::positive("0").is_err());
/// ```
pub fn positive(s: &str) -> Result<usize, String> {
    bounded(s, 1, 1_000_000, "a count of at least 1")
}

/// Value parser for `--num-gpus`: ranks on one node.
pub fn ranks_per_node(s: &str) -> Result<usize, String> {
    bounded(s, 1, 1024, "the number of ranks (GPUs, or CPU processes) on each node")
}

/// Value parser for `--num-nodes`.
pub fn node_count(s: &str) -> Result<usize, String> {
    bounded(s, 1, 4096, "the number of nodes in the job")
}

/// Value parser for `--node-id` (checked against `--num-nodes` by `RunOptions::check_node`).
pub fn node_index(s: &str) -> Result<usize, String> {
    bounded(s, 0, 4095, "this node's index, 0 to --num-nodes minus 1")
}

pub(crate) fn threads(s: &str) -> Result<usize, String> {
    bounded(s, 1, 4096, "torch threads per rank")
}

pub(crate) fn timeout_seconds(s: &str) -> Result<u64, String> {
    bounded(s, 1, 86_400, "seconds to wait for other ranks").map(|n| n as u64)
}

/// Value parser for `--base-lr`: a finite number above 0 and at most 10.
///
/// ```
/// assert_eq!(labkit::learning_rate("0.01"), Ok(0.01));
/// assert!(labkit::learning_rate("0").is_err() && labkit::learning_rate("inf").is_err());
/// ```
pub fn learning_rate(s: &str) -> Result<f64, String> {
    let lr: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number; expected a learning rate such as 0.01"))?;
    if !(lr.is_finite() && lr > 0.0 && lr <= 10.0) {
        return Err(format!(
            "{lr} is not a usable learning rate; expected a number above 0 and at most 10, such as 0.01"
        ));
    }
    Ok(lr)
}

/// `--momentum`: SGD's momentum, at least 0 (0 is the DLI lab's plain SGD) and below 1
/// (1 and more never forgets a gradient, and the steps grow without bound).
///
/// ```
/// assert_eq!(labkit::momentum("0.9"), Ok(0.9));
/// assert!(labkit::momentum("1").is_err() && labkit::momentum("-0.5").is_err());
/// ```
pub fn momentum(s: &str) -> Result<f64, String> {
    let m: f64 =
        s.trim().parse().map_err(|_| format!("`{s}` is not a number; expected a momentum such as 0.9"))?;
    if !(0.0..1.0).contains(&m) {
        return Err(format!("{m} is not a usable momentum; expected at least 0 and below 1, such as 0.9"));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, ValueEnum)]
    enum One {
        Only,
    }

    #[derive(Clone, ValueEnum)]
    enum Three {
        Real,
        Generated,
        Auto,
    }

    #[test]
    fn expected_values_read_as_a_list() {
        assert_eq!(one_of::<One>(), "only");
        assert_eq!(one_of::<Three>(), "real, generated or auto");
        assert_eq!(value_name(&Three::Generated), "generated");
    }
}
