//! The placement rule: which device each rank of a node computes on, and through which
//! backend its process group talks. One rule for everyone who needs it: the lab's
//! programs (`RunOptions::placement`), the checker and the benchmarks (which choose the
//! programs' `--device` and `--share-gpus` from it, so that what they expect is what the
//! programs do).
//!
//! Its inputs are values, never the environment: what the options ask (`--device`,
//! `--share-gpus`), how many ranks run on the node (the program's `--num-gpus`) and how
//! many GPUs libtorch sees there.
use clap::ValueEnum;
use tch::Device;
use tch_distributed::Backend;

/// Where a rank computes: `auto` (one GPU per rank when this node has a GPU for every
/// rank, else the CPU), `cpu`, or `cuda` (`gpu` too).
// No doc comments on the values: see `DatasetKind`'s note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[allow(missing_docs)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    #[value(alias = "gpu")]
    Cuda,
}

impl DeviceChoice {
    /// The single-GPU program's device (before step 7): the first GPU, or the CPU.
    pub fn first(self) -> Device {
        match self {
            DeviceChoice::Cpu => Device::Cpu,
            DeviceChoice::Cuda => Device::Cuda(0),
            DeviceChoice::Auto => Device::cuda_if_available(),
        }
    }
}

/// What one node asks of its GPUs: `--device`, `--share-gpus`, and how many ranks it
/// runs. The defaults are the options' (`auto`, not shared) and one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuRequest {
    /// `--device`.
    pub device: DeviceChoice,
    /// `--share-gpus`: ranks may share a GPU.
    pub share_gpus: bool,
    /// The ranks of this node (`--num-gpus`).
    pub ranks: usize,
}

impl Default for GpuRequest {
    fn default() -> Self {
        GpuRequest { device: DeviceChoice::Auto, share_gpus: false, ranks: 1 }
    }
}

/// Whether the ranks of one node can run as `request` asks with `gpus` GPUs: the
/// problem and what to do when they cannot. Too few GPUs is bad input unless the ranks
/// may share them (`--share-gpus`).
///
/// ```
/// use labkit::{check_gpus, DeviceChoice, GpuRequest};
/// let two_ranks = GpuRequest { device: DeviceChoice::Cuda, ranks: 2, ..Default::default() };
/// assert!(check_gpus(two_ranks, 1).is_err()); // NCCL needs a GPU per rank
/// assert!(check_gpus(GpuRequest { share_gpus: true, ..two_ranks }, 1).is_ok());
/// ```
pub fn check_gpus(request: GpuRequest, gpus: usize) -> Result<(), String> {
    Placement::of_node(request, gpus).map(|_| ())
}

/// Where the ranks of one node compute, and through which backend.
///
/// ```
/// use labkit::{DeviceChoice, GpuRequest, Placement};
/// use tch::Device;
/// // Two ranks asking for GPUs on a node with one: they share it, over Gloo.
/// let request = GpuRequest { device: DeviceChoice::Cuda, share_gpus: true, ranks: 2 };
/// let placement = Placement::of_node(request, 1).unwrap();
/// assert_eq!(placement, Placement::SharedGpus { gpus: 1 });
/// assert_eq!(placement.device(1), Device::Cuda(0));
/// assert_eq!(placement.backend(), tch_distributed::Backend::Gloo);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// CPU processes, Gloo.
    Cpu,
    /// A GPU of its own for every rank, `cuda:<local rank>`, NCCL.
    GpuPerRank,
    /// More ranks on the node than GPUs: local rank L on `cuda:<L mod gpus>`, over Gloo
    /// on CUDA tensors, since NCCL refuses two ranks on one GPU (`--share-gpus`).
    SharedGpus {
        /// The GPUs the ranks share.
        gpus: usize,
    },
}

impl Placement {
    /// The rule for `ranks` ranks that want GPUs and may share them, on a node with
    /// `gpus` GPUs: a GPU per rank when there are enough, shared GPUs when there are
    /// fewer, the CPU when there is none. The checker and the benchmarks choose the
    /// programs' options from it ([`Placement::options`]).
    ///
    /// ```
    /// use labkit::Placement;
    /// assert_eq!(Placement::for_gpus(2, 8), Placement::GpuPerRank);
    /// assert_eq!(Placement::for_gpus(3, 2), Placement::SharedGpus { gpus: 2 });
    /// assert_eq!(Placement::for_gpus(2, 0), Placement::Cpu);
    /// ```
    pub fn for_gpus(ranks: usize, gpus: usize) -> Placement {
        if gpus == 0 {
            Placement::Cpu
        } else if ranks <= gpus {
            Placement::GpuPerRank
        } else {
            Placement::SharedGpus { gpus }
        }
    }

    /// What a node's options ask for, on a node with `gpus` GPUs; `Err` is bad input:
    /// the problem and what to do. `cpu` is the CPU; `auto` a GPU per rank when there is
    /// one for every rank (a node never mixes GPU and CPU ranks: NCCL needs one GPU per
    /// rank), else the CPU; `cuda` a GPU per rank, or shared GPUs with `--share-gpus`.
    pub fn of_node(request: GpuRequest, gpus: usize) -> Result<Placement, String> {
        let GpuRequest { device, share_gpus, ranks } = request;
        let placement = Placement::for_gpus(ranks, gpus);
        match (device, placement) {
            (DeviceChoice::Cpu, _) | (DeviceChoice::Auto, Placement::Cpu | Placement::SharedGpus { .. }) => {
                Ok(Placement::Cpu)
            }
            (_, Placement::GpuPerRank) => Ok(Placement::GpuPerRank),
            (DeviceChoice::Cuda, Placement::Cpu) => Err(
                "--device cuda, but libtorch sees no GPU on this node: run on the CPU (--device cpu, or --device auto, which uses GPUs where there are enough)"
                    .into(),
            ),
            (DeviceChoice::Cuda, shared) if share_gpus => Ok(shared),
            (DeviceChoice::Cuda, _) => Err(format!(
                "--device cuda with {ranks} ranks on this node, which has {gpus} GPU(s) (NCCL needs one per rank): ask for at most {gpus} rank(s) per node (--num-gpus {gpus}), or add --share-gpus to let ranks share a GPU (Gloo on CUDA tensors)"
            )),
        }
    }

    /// The device of the rank with this local rank.
    pub fn device(self, local_rank: usize) -> Device {
        match self {
            Placement::Cpu => Device::Cpu,
            Placement::GpuPerRank => Device::Cuda(local_rank),
            Placement::SharedGpus { gpus } => Device::Cuda(local_rank % gpus.max(1)),
        }
    }

    /// The backend of the node's process group: PyTorch's rule (NCCL for GPUs, Gloo for
    /// the CPU), except that ranks sharing a GPU use Gloo, which allows it.
    pub fn backend(self) -> Backend {
        match self {
            Placement::GpuPerRank => Backend::Nccl,
            Placement::Cpu | Placement::SharedGpus { .. } => Backend::Gloo,
        }
    }

    /// The lab programs' options that ask for it (`--device`, `--share-gpus`).
    pub fn options(self) -> Vec<String> {
        let options: &[&str] = match self {
            Placement::Cpu => &["--device", "cpu"],
            Placement::GpuPerRank => &["--device", "cuda"],
            Placement::SharedGpus { .. } => &["--device", "cuda", "--share-gpus"],
        };
        options.iter().map(|o| o.to_string()).collect()
    }
}

/// How many GPUs libtorch sees on this machine.
pub fn gpu_count() -> usize {
    usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{check_gpus, DeviceChoice, GpuRequest, Placement};
    use tch::Device;
    use tch_distributed::Backend;

    fn cuda(share_gpus: bool, ranks: usize) -> GpuRequest {
        GpuRequest { device: DeviceChoice::Cuda, share_gpus, ranks }
    }

    #[test]
    fn more_ranks_than_gpus_is_refused_unless_shared() {
        let refused = check_gpus(cuda(false, 2), 1).unwrap_err();
        for part in ["2 ranks", "1 GPU", "--num-gpus 1", "--share-gpus"] {
            assert!(refused.contains(part), "{refused}");
        }
        assert_eq!(check_gpus(cuda(true, 2), 1), Ok(()));
        assert_eq!(check_gpus(cuda(false, 2), 2), Ok(()));
        assert_eq!(check_gpus(cuda(false, 1), 8), Ok(()));
    }

    #[test]
    fn no_gpu_at_all_is_refused_even_when_shared() {
        for share in [false, true] {
            let refused = check_gpus(cuda(share, 1), 0).unwrap_err();
            assert!(refused.contains("no GPU") && refused.contains("--device cpu"), "{refused}");
        }
    }

    #[test]
    fn cpu_and_auto_need_no_gpu() {
        for device in [DeviceChoice::Cpu, DeviceChoice::Auto] {
            assert_eq!(check_gpus(GpuRequest { device, share_gpus: false, ranks: 4 }, 0), Ok(()));
        }
    }

    /// Every local rank's device on a node of `ranks` ranks and `gpus` GPUs, and the
    /// node's backend.
    fn placed(request: GpuRequest, gpus: usize) -> (Vec<Device>, Backend) {
        let placement = Placement::of_node(request, gpus).unwrap();
        ((0..request.ranks).map(|r| placement.device(r)).collect(), placement.backend())
    }

    #[test]
    fn a_gpu_per_rank_when_there_are_enough_over_nccl() {
        for gpus in [1, 2, 4, 8] {
            for ranks in 1..=gpus {
                for request in
                    [cuda(false, ranks), cuda(true, ranks), GpuRequest { ranks, ..Default::default() }]
                {
                    let (devices, backend) = placed(request, gpus);
                    assert_eq!(
                        devices,
                        (0..ranks).map(Device::Cuda).collect::<Vec<_>>(),
                        "{request:?}, {gpus}"
                    );
                    assert_eq!(backend, Backend::Nccl, "{request:?}, {gpus} GPUs");
                }
            }
        }
    }

    #[test]
    fn more_ranks_than_gpus_take_them_in_turn_over_gloo_when_shared() {
        for (ranks, gpus, expected) in [
            (2, 1, vec![0, 0]),
            (3, 2, vec![0, 1, 0]),
            (8, 4, vec![0, 1, 2, 3, 0, 1, 2, 3]),
            (9, 8, vec![0, 1, 2, 3, 4, 5, 6, 7, 0]),
        ] {
            let (devices, backend) = placed(cuda(true, ranks), gpus);
            assert_eq!(devices, expected.into_iter().map(Device::Cuda).collect::<Vec<_>>());
            assert_eq!(backend, Backend::Gloo, "{ranks} ranks sharing {gpus} GPUs");
        }
    }

    #[test]
    fn auto_uses_the_cpu_unless_every_rank_has_a_gpu() {
        for (ranks, gpus) in [(2, 1), (3, 2), (9, 8), (1, 0), (4, 0)] {
            let (devices, backend) = placed(GpuRequest { ranks, ..Default::default() }, gpus);
            assert_eq!(devices, vec![Device::Cpu; ranks], "{ranks} ranks, {gpus} GPUs");
            assert_eq!(backend, Backend::Gloo);
        }
        let (devices, _) = placed(GpuRequest { device: DeviceChoice::Cpu, ranks: 2, share_gpus: false }, 8);
        assert_eq!(devices, vec![Device::Cpu; 2], "--device cpu on a GPU node");
    }

    #[test]
    fn the_options_that_ask_for_a_placement_give_it_back() {
        // What the checker and the benchmarks pass is what the programs then choose.
        for (ranks, gpus) in [(2, 0), (2, 1), (2, 2), (3, 2), (4, 8), (9, 8)] {
            let placement = Placement::for_gpus(ranks, gpus);
            let options = placement.options();
            let request = GpuRequest {
                device: if options[1] == "cpu" { DeviceChoice::Cpu } else { DeviceChoice::Cuda },
                share_gpus: options.contains(&"--share-gpus".to_string()),
                ranks,
            };
            assert_eq!(Placement::of_node(request, gpus), Ok(placement), "{ranks} ranks, {gpus} GPUs");
        }
    }
}
