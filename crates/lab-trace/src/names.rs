//! The values of the trace that are one of a known few: the collective, its reduce op
//! and dtype, the data set's kind and what preparing it did. Each is an enum written as
//! the name PyTorch, tch or labkit gives it (`all_reduce`, `SUM`, `Float`, `real`,
//! `Downloaded`), so that a check matches a variant, never a spelling that can drift.
//!
//! A name the enum does not know is an error, as an unknown event is: a trace written
//! by another revision of the lab is reported as such, not judged from a guess.
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An enum of named values, with the one table of their spellings.
macro_rules! named {
    (
        $(#[$doc:meta])*
        pub enum $name:ident {
            $($(#[$variant_doc:meta])* $variant:ident = $spelling:literal,)*
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$variant_doc])* $variant,)*
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// Every value's name, as [`Self::ALL`].
            pub const NAMES: &'static [&'static str] = &[$($spelling),*];

            /// The name the trace writes.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $spelling,)*
                }
            }

            /// The value named `name`, if there is one.
            pub fn from_name(name: &str) -> Option<$name> {
                match name {
                    $($spelling => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
                $name::from_name(&name)
                    .ok_or_else(|| serde::de::Error::unknown_variant(&name, $name::NAMES))
            }
        }
    };
}

named! {
    /// A collective issued through tch-distributed, by PyTorch's name: the program's own
    /// calls and those DDP and FSDP make on their own. labkit converts
    /// tch-distributed's `debug::CollectiveOp` into it.
    pub enum CollectiveOp {
        /// `dist::all_reduce`.
        AllReduce = "all_reduce",
        /// `dist::reduce`.
        Reduce = "reduce",
        /// `dist::broadcast`.
        Broadcast = "broadcast",
        /// `dist::all_gather`, into one tensor per rank.
        AllGather = "all_gather",
        /// `dist::all_gather_into_tensor`: FSDP's gathering of a unit's shards.
        AllGatherIntoTensor = "all_gather_into_tensor",
        /// `dist::reduce_scatter_tensor`: FSDP's reduction of a unit's gradients.
        ReduceScatterTensor = "reduce_scatter_tensor",
        /// `dist::barrier`.
        Barrier = "barrier",
        /// DDP's broadcast of the model's state from rank 0 (at wrapping, and of the
        /// buffers before each forward).
        BroadcastCoalesced = "broadcast_coalesced",
        /// DDP's check, at wrapping, that every rank's model has the same parameters.
        VerifyParamsAcrossProcesses = "verify_params_across_processes",
        /// A point-to-point send to one rank.
        Send = "send",
        /// A point-to-point receive from one rank.
        Recv = "recv",
    }
}

impl CollectiveOp {
    /// Whether this is a `send` or a `recv`: two ranks of the group take part, not all of
    /// them, and the group numbers them apart from its collectives.
    pub fn is_point_to_point(self) -> bool {
        matches!(self, CollectiveOp::Send | CollectiveOp::Recv)
    }
}

named! {
    /// How a collective combines the ranks' values, by PyTorch's name (`ReduceOp.SUM`).
    /// labkit converts tch-distributed's `ReduceOp` into it.
    pub enum ReduceOp {
        /// The sum over ranks.
        Sum = "SUM",
        /// Mean over ranks. NCCL only: with Gloo, use `Sum` and divide by the world size.
        Avg = "AVG",
        /// The product over ranks.
        Product = "PRODUCT",
        /// The smallest value, element by element.
        Min = "MIN",
        /// The largest value, element by element.
        Max = "MAX",
    }
}

named! {
    /// A tensor's element type, by tch's name for it (`tch::Kind`, whose `Debug` text
    /// the trace has always held); labkit converts the `Kind` of a collective into it.
    pub enum Dtype {
        Uint8 = "Uint8",
        Int8 = "Int8",
        Int16 = "Int16",
        Int = "Int",
        Int64 = "Int64",
        Half = "Half",
        Float = "Float",
        Double = "Double",
        ComplexHalf = "ComplexHalf",
        ComplexFloat = "ComplexFloat",
        ComplexDouble = "ComplexDouble",
        Bool = "Bool",
        QInt8 = "QInt8",
        QUInt8 = "QUInt8",
        QInt32 = "QInt32",
        BFloat16 = "BFloat16",
        Float8e5m2 = "Float8e5m2",
        Float8e4m3fn = "Float8e4m3fn",
        Float8e5m2fnuz = "Float8e5m2fnuz",
        Float8e4m3fnuz = "Float8e4m3fnuz",
    }
}

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

#[cfg(test)]
mod tests {
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

    #[test]
    fn sends_and_receives_are_the_point_to_point_calls() {
        let p2p: Vec<CollectiveOp> =
            CollectiveOp::ALL.iter().copied().filter(|op| op.is_point_to_point()).collect();
        assert_eq!(p2p, [CollectiveOp::Send, CollectiveOp::Recv]);
    }
}
