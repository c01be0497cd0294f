//! bf16 automatic mixed precision (PyTorch's `torch.autocast(device, dtype=torch.bfloat16)`).
use std::ffi::c_int;
use std::ptr;

use tch::Device;

use crate::error::{check, Result};
use crate::ffi;

/// Runs `f` with autocast on `device`'s type, bfloat16 as the lower precision: inside,
/// convolutions and matrix products compute in bf16 while reductions such as the loss
/// stay float32; parameters and their gradients stay float32. Works on CPU and CUDA.
/// Regions nest; the previous state is restored even when `f` panics.
pub fn autocast_bf16<T>(device: Device, f: impl FnOnce() -> T) -> Result<T> {
    let cuda = c_int::from(device.is_cuda());
    let mut err = ptr::null_mut();
    let previous = unsafe { ffi::tchd_autocast_enter(cuda, &mut err) };
    check(if previous < 0 { previous } else { 0 }, err)?;
    struct Exit(c_int, c_int);
    impl Drop for Exit {
        fn drop(&mut self) {
            unsafe { ffi::tchd_autocast_exit(self.0, self.1) }
        }
    }
    let _exit = Exit(cuda, previous);
    Ok(f())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    #[test]
    fn cpu_matmul_runs_in_bf16_inside_and_float_outside() {
        let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
        let inside = autocast_bf16(Device::Cpu, || a.matmul(&a)).unwrap();
        assert_eq!(inside.kind(), Kind::BFloat16);
        assert_eq!(a.matmul(&a).kind(), Kind::Float, "autocast is off again after the region");
        let nested =
            autocast_bf16(Device::Cpu, || autocast_bf16(Device::Cpu, || a.matmul(&a)).unwrap()).unwrap();
        assert_eq!(nested.kind(), Kind::BFloat16);
        assert_eq!(a.matmul(&a).kind(), Kind::Float);
    }
}
