//! The values of the trace that are one of a known few: the collective, its reduce op
//! and dtype (PyTorch's names, defined once in pytorch-names and shared with
//! tch-distributed), the data set's kind and what preparing it did. Each is an enum
//! written as its name (`all_reduce`, `SUM`, `Float`, `real`, `Downloaded`), so that a
//! check matches a variant, never a spelling that can drift.
//!
//! A name the enum does not know is an error, as an unknown event is: a trace written
//! by another revision of the lab is reported as such, not judged from a guess.
use pytorch_names::{named, serde_by_name};

pub use pytorch_names::{CollectiveOp, Dtype, ReduceOp};

named! {
    /// Which data set, as `--dataset` names it: asked for in `prepare_dataset` (any of
    /// the three), used in `dataset_ready` (never `auto`). labkit's `DatasetKind`, the
    /// command line's, converts into it.
    pub enum DatasetKind {
        /// The real Fashion-MNIST.
        Real = "real",
        /// The generated stand-in.
        Generated = "generated",
        /// The real data when it can be had, the generated stand-in otherwise.
        Auto = "auto",
    }
}

named! {
    /// What preparing the data set had to do (labkit's `DatasetAction` is this one).
    pub enum DatasetAction {
        /// All four files were already there and intact.
        Present = "Present",
        /// The system's copy (Debian's `dataset-fashion-mnist`) is used in place.
        SystemCopy = "SystemCopy",
        /// At least one file was downloaded.
        Downloaded = "Downloaded",
        /// The stand-in was generated.
        Generated = "Generated",
    }
}

serde_by_name!(DatasetKind, DatasetAction);

#[cfg(test)]
mod tests {
    use std::fmt;

    use serde::{Deserialize, Serialize};

    use super::*;

    /// Every value is written as its name and read back from it; the names are the ones
    /// recorded traces hold.
    fn round_trips<T>(all: &[T], names: &[&str])
    where
        T: Copy + PartialEq + fmt::Debug + fmt::Display + Serialize + for<'de> Deserialize<'de>,
    {
        assert_eq!(all.len(), names.len());
        for (value, name) in all.iter().zip(names) {
            assert_eq!(serde_json::to_value(value).unwrap(), serde_json::Value::from(*name));
            assert_eq!(serde_json::from_value::<T>(serde_json::Value::from(*name)).unwrap(), *value);
            assert_eq!(value.to_string(), *name);
        }
    }

    #[test]
    fn values_are_written_as_their_names() {
        round_trips(CollectiveOp::ALL, CollectiveOp::NAMES);
        round_trips(ReduceOp::ALL, ReduceOp::NAMES);
        round_trips(Dtype::ALL, Dtype::NAMES);
        round_trips(DatasetKind::ALL, DatasetKind::NAMES);
        round_trips(DatasetAction::ALL, DatasetAction::NAMES);
        // Spelled out once here, as the recorded traces hold them: a renamed variant that
        // changes its name fails this, not the fixtures' judgements.
        let line = serde_json::to_string(&(
            [CollectiveOp::AllGatherIntoTensor, CollectiveOp::VerifyParamsAcrossProcesses],
            ReduceOp::Sum,
            [Dtype::Float, Dtype::Int64],
            DatasetKind::Generated,
            DatasetAction::SystemCopy,
        ))
        .unwrap();
        assert_eq!(
            line,
            r#"[["all_gather_into_tensor","verify_params_across_processes"],"SUM",["Float","Int64"],"generated","SystemCopy"]"#
        );
    }

    #[test]
    fn an_unknown_name_is_an_error_naming_the_known_ones() {
        let err = serde_json::from_str::<CollectiveOp>("\"all_to_all\"").unwrap_err().to_string();
        assert!(
            err.starts_with("unknown variant `all_to_all`, expected one of `all_reduce`, `reduce`"),
            "{err}"
        );
        // Names are exact: PyTorch's `ReduceOp.SUM` is not `sum` or `Sum`.
        assert!(serde_json::from_str::<ReduceOp>("\"sum\"").is_err());
        assert!(serde_json::from_str::<DatasetKind>("\"Real\"").is_err());
        assert!(serde_json::from_str::<Dtype>("1").is_err(), "a number is no name");
        assert_eq!(DatasetAction::from_name("Generated"), Some(DatasetAction::Generated));
        assert_eq!(DatasetAction::from_name("generated"), None);
    }
}
