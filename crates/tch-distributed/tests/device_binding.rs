//! A group knows its rank's GPU when told (`GroupOptions::device_id`, PyTorch's
//! `init_process_group(device_id=...)`), so NCCL never has to guess it from the
//! global rank. Binding only records the device, so a Gloo group shows it on a machine
//! without a GPU too.
mod common;

use common::single_rank_group;

use tch::Device;

#[test]
fn the_device_reaches_the_group() {
    assert_eq!(single_rank_group(Some(Device::Cuda(1))).bound_device(), Some(Device::Cuda(1)));
    assert_eq!(single_rank_group(Some(Device::Cuda(0))).bound_device(), Some(Device::Cuda(0)));
}

#[test]
fn no_device_or_the_cpu_leaves_the_group_unbound() {
    assert_eq!(single_rank_group(None).bound_device(), None);
    assert_eq!(single_rank_group(Some(Device::Cpu)).bound_device(), None);
}
