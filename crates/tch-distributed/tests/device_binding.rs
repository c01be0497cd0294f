//! A group knows its rank's GPU when told (`GroupOptions::device_id`, PyTorch's
//! `init_process_group(device_id=...)`), so NCCL never has to guess it from the
//! global rank. Binding only records the device, so a Gloo group shows it on a machine
//! without a GPU too.
use std::time::Duration;

use tch::Device;
use tch_distributed::{Backend, GroupOptions, ProcessGroup, Store, TcpStoreOptions};

fn single_rank_group(device_id: Option<Device>) -> ProcessGroup {
    let store = Store::tcp(&TcpStoreOptions {
        host: "127.0.0.1".into(),
        port: 0,
        is_server: true,
        world_size: Some(1),
        wait_for_workers: true,
        timeout: Duration::from_secs(30),
    })
    .expect("a one-rank store");
    let opts = GroupOptions { gloo_hostname: Some("127.0.0.1".into()), device_id, ..GroupOptions::default() };
    ProcessGroup::new(&store, Backend::Gloo, 0, 1, &opts).expect("a one-rank Gloo group")
}

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
