//! Shared code of the ddp-bench binaries and of the scaling demo.
pub mod common;
pub mod labbench;
