//! The enums this crate names by PyTorch's spelling ([`ReduceOp`](crate::ReduceOp),
//! [`debug::CollectiveOp`](crate::debug::CollectiveOp)): one table per enum gives the
//! variants, `ALL` and `name()`, so that a variant cannot be added without its name or
//! be left out of `ALL`.

/// An enum whose variants each have PyTorch's name for them.
macro_rules! pytorch_named {
    (
        $(#[$doc:meta])*
        pub enum $name:ident {
            $($(#[$variant_doc:meta])* $variant:ident = $spelling:literal,)*
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_doc])* $variant,)*
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// PyTorch's name for it.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $spelling,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

pub(crate) use pytorch_named;
