//! `Backend`: the communication library behind a group (Gloo or NCCL), and whether this
//! build has it.
use std::fmt;
use std::str::FromStr;

use tch::Device;

use crate::error::{DistError, ErrorKind, Result};
use crate::ffi;

/// The communication library behind a group, as in `torch.distributed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// CPU tensors (and CUDA tensors, more slowly). Works everywhere.
    Gloo,
    /// CUDA tensors only; the fast choice on GPUs.
    Nccl,
}

impl Backend {
    /// PyTorch's rule: NCCL for CUDA devices, Gloo otherwise.
    pub fn for_device(device: Device) -> Backend {
        match device {
            Device::Cuda(_) => Backend::Nccl,
            _ => Backend::Gloo,
        }
    }

    /// Whether this build can create groups of this backend at all.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Gloo => true,
            Backend::Nccl => self.check_available().is_ok(),
        }
    }

    /// An error saying why this backend cannot be used here, if it cannot.
    pub fn check_available(self) -> Result<()> {
        if self == Backend::Nccl {
            if !nccl_compiled_in() {
                return Err(DistError::new(
                    ErrorKind::Unsupported,
                    "this build has no NCCL (libtorch without CUDA, or CUDA headers missing at build time): use Backend::Gloo",
                ));
            }
            if !tch::Cuda::is_available() {
                return Err(DistError::new(
                    ErrorKind::Unsupported,
                    "NCCL needs CUDA GPUs and none is visible: use Backend::Gloo for CPU ranks",
                ));
            }
        }
        Ok(())
    }

    pub(super) fn raw(self) -> i32 {
        match self {
            Backend::Gloo => ffi::TCHD_GLOO,
            Backend::Nccl => ffi::TCHD_NCCL,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        })
    }
}

impl FromStr for Backend {
    type Err = DistError;
    fn from_str(s: &str) -> Result<Backend> {
        match s.to_ascii_lowercase().as_str() {
            "gloo" => Ok(Backend::Gloo),
            "nccl" => Ok(Backend::Nccl),
            _ => Err(DistError::invalid(format!(
                "unknown backend {s:?}: use \"gloo\" (CPU) or \"nccl\" (CUDA)"
            ))),
        }
    }
}

/// True when ProcessGroupNCCL was compiled into this build.
pub fn nccl_compiled_in() -> bool {
    unsafe { ffi::tchd_has_nccl() != 0 }
}
