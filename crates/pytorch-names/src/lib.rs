#![doc = include_str!("../README.md")]
//!
//! Each enum is written by [`named!`], the one table of its variants and their
//! spellings, so that a variant cannot be added without its name or be left out of
//! `ALL`; a name that is not in the table is `None` (or a deserialization error naming
//! the known ones), never a guess.

/// An enum whose variants each have one name (PyTorch's, tch's or the lab's): the
/// variants, `ALL`, `NAMES`, `name()`, `from_name()`, `Display` and `FromStr`, from one
/// table. [`serde_by_name!`] adds serde's traits, the value written as its name.
///
/// ```
/// pytorch_names::named! {
///     /// Which way.
///     pub enum Way {
///         Up = "up",
///         Down = "down",
///     }
/// }
/// assert_eq!(Way::Down.name(), "down");
/// assert_eq!("up".parse::<Way>(), Ok(Way::Up));
/// assert_eq!(Way::NAMES, ["up", "down"]);
/// ```
#[macro_export]
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
            /// Every value's name, in the order of [`Self::ALL`].
            pub const NAMES: &'static [&'static str] = &[$($spelling),*];

            /// Its name.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $spelling,)*
                }
            }

            /// The value named `name` (exactly: `SUM` is not `sum`), if there is one.
            pub fn from_name(name: &str) -> ::core::option::Option<$name> {
                match name {
                    $($spelling => ::core::option::Option::Some($name::$variant),)*
                    _ => ::core::option::Option::None,
                }
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.pad(self.name())
            }
        }

        impl ::core::str::FromStr for $name {
            type Err = $crate::UnknownName;
            fn from_str(name: &str) -> ::core::result::Result<$name, $crate::UnknownName> {
                $name::from_name(name).ok_or_else(|| $crate::UnknownName {
                    name: name.into(),
                    known: $name::NAMES,
                })
            }
        }
    };
}

/// Serialize and Deserialize for enums made by [`named!`]: each value is written as its
/// name; an unknown name is an error listing the known ones. Expands in the calling
/// crate, which must depend on serde.
#[macro_export]
macro_rules! serde_by_name {
    ($($name:ty),* $(,)?) => {$(
        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> ::core::result::Result<Self, D::Error> {
                let name = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(deserializer)?;
                <$name>::from_name(&name)
                    .ok_or_else(|| <D::Error as ::serde::de::Error>::unknown_variant(&name, <$name>::NAMES))
            }
        }
    )*};
}

/// A name that none of an enum's values has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    pub name: String,
    pub known: &'static [&'static str],
}

impl std::fmt::Display for UnknownName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown name `{}`, expected one of `{}`", self.name, self.known.join("`, `"))
    }
}

impl std::error::Error for UnknownName {}

named! {
    /// A collective of `torch.distributed`, by PyTorch's name: a program's own calls
    /// and those DDP and FSDP make on their own.
    pub enum CollectiveOp {
        /// `all_reduce`.
        AllReduce = "all_reduce",
        /// `reduce`, to one rank.
        Reduce = "reduce",
        /// `broadcast`, from one rank.
        Broadcast = "broadcast",
        /// `all_gather`, into one tensor per rank.
        AllGather = "all_gather",
        /// `all_gather_into_tensor`: FSDP's gathering of a unit's shards.
        AllGatherIntoTensor = "all_gather_into_tensor",
        /// `reduce_scatter_tensor`: FSDP's reduction of a unit's gradients.
        ReduceScatterTensor = "reduce_scatter_tensor",
        /// `barrier`.
        Barrier = "barrier",
        /// DDP's broadcast of the model's state from rank 0 (at wrapping, and of the
        /// buffers before each forward).
        BroadcastCoalesced = "broadcast_coalesced",
        /// DDP's check, at wrapping, that every rank's model has the same parameters.
        VerifyParamsAcrossProcesses = "verify_params_across_processes",
        /// A point-to-point send to one rank (`send`, `isend`).
        Send = "send",
        /// A point-to-point receive from one rank, or from any (`recv`, `irecv`).
        Recv = "recv",
    }
}

impl CollectiveOp {
    /// Whether this is a `send` or a `recv`: two ranks of the group take part, not all
    /// of them, and a group numbers them apart from its collectives.
    pub fn is_point_to_point(self) -> bool {
        matches!(self, CollectiveOp::Send | CollectiveOp::Recv)
    }
}

named! {
    /// How a collective combines the ranks' values, by PyTorch's name (`ReduceOp.SUM`).
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
    /// A tensor's element type, by tch's name for it (the `Debug` text of `tch::Kind`,
    /// which traces have always held).
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

#[cfg(feature = "serde")]
serde_by_name!(CollectiveOp, ReduceOp, Dtype);

/// One call in the words PyTorch's logs and arguments use: e.g.
/// `reduce(op=SUM, root=1) Double[1]`, `send(dst=1) Float[4]`, `barrier()`. `peer` is
/// the destination of `reduce`, the source of `broadcast`, the other rank of a `send`
/// (`dst`) or a `recv` (`src`); `tensor` the input's dtype name and element count.
pub fn describe(
    op: CollectiveOp,
    reduce_op: Option<ReduceOp>,
    peer: Option<usize>,
    tensor: Option<(&str, i64)>,
) -> String {
    let mut args = Vec::new();
    if let Some(reduce_op) = reduce_op {
        args.push(format!("op={reduce_op}"));
    }
    if let Some(peer) = peer {
        let key = match op {
            CollectiveOp::Send => "dst",
            CollectiveOp::Recv => "src",
            _ => "root",
        };
        args.push(format!("{key}={peer}"));
    }
    let tensor = tensor.map(|(dtype, numel)| format!(" {dtype}[{numel}]")).unwrap_or_default();
    format!("{op}({}){tensor}", args.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_described_in_pytorchs_words() {
        let reduce = describe(CollectiveOp::Reduce, Some(ReduceOp::Sum), Some(1), Some(("Double", 1)));
        assert_eq!(reduce, "reduce(op=SUM, root=1) Double[1]");
        assert_eq!(describe(CollectiveOp::Send, None, Some(1), Some(("Float", 4))), "send(dst=1) Float[4]");
        assert_eq!(describe(CollectiveOp::Recv, None, Some(0), Some(("Float", 4))), "recv(src=0) Float[4]");
        assert_eq!(describe(CollectiveOp::Barrier, None, None, None), "barrier()");
    }

    #[test]
    fn names_are_exact_and_unknown_ones_are_named() {
        assert_eq!("SUM".parse::<ReduceOp>(), Ok(ReduceOp::Sum));
        let err = "sum".parse::<ReduceOp>().unwrap_err().to_string();
        assert_eq!(err, "unknown name `sum`, expected one of `SUM`, `AVG`, `PRODUCT`, `MIN`, `MAX`");
        assert_eq!(CollectiveOp::from_name("all_to_all"), None);
        for (op, name) in CollectiveOp::ALL.iter().zip(CollectiveOp::NAMES) {
            assert_eq!(op.to_string(), *name);
            assert_eq!(CollectiveOp::from_name(name), Some(*op));
        }
        assert_eq!(Dtype::ALL.len(), Dtype::NAMES.len());
    }

    #[test]
    fn sends_and_receives_are_the_point_to_point_calls() {
        let p2p: Vec<CollectiveOp> =
            CollectiveOp::ALL.iter().copied().filter(|op| op.is_point_to_point()).collect();
        assert_eq!(p2p, [CollectiveOp::Send, CollectiveOp::Recv]);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn with_serde_each_value_is_written_as_its_name() {
        let line =
            serde_json::to_string(&(CollectiveOp::AllGatherIntoTensor, ReduceOp::Sum, Dtype::Int64)).unwrap();
        assert_eq!(line, r#"["all_gather_into_tensor","SUM","Int64"]"#);
        let err = serde_json::from_str::<CollectiveOp>("\"all_to_all\"").unwrap_err().to_string();
        assert!(
            err.starts_with("unknown variant `all_to_all`, expected one of `all_reduce`, `reduce`"),
            "{err}"
        );
    }
}
