//! Where a run's ranks compute (CPU, a GPU each, or shared GPUs) and the options that ask
//! for it.

/// Where the ranks of a run compute, and through which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// CPU processes, Gloo.
    Cpu,
    /// A GPU of its own for every rank, NCCL.
    GpuPerRank,
    /// More ranks on a node than GPUs: they share them (`--share-gpus`), Gloo on CUDA
    /// tensors, so a one-GPU machine still checks every step on GPU tensors.
    SharedGpus { gpus: usize },
}

/// A GPU per rank when this machine has one for each rank of a single node; shared
/// GPUs otherwise (simulated nodes share one machine, so their local ranks land on the
/// same GPUs, which NCCL refuses); the CPU without GPUs.
pub fn placement(nodes: usize, ranks_per_node: usize, gpus: usize) -> Placement {
    if gpus == 0 {
        Placement::Cpu
    } else if nodes == 1 && gpus >= ranks_per_node {
        Placement::GpuPerRank
    } else {
        Placement::SharedGpus { gpus }
    }
}

impl Placement {
    /// The program's options that ask for it.
    pub fn options(self) -> Vec<String> {
        match self {
            Placement::Cpu => vec!["--device".into(), "cpu".into()],
            Placement::GpuPerRank => vec!["--device".into(), "cuda".into()],
            Placement::SharedGpus { .. } => vec!["--device".into(), "cuda".into(), "--share-gpus".into()],
        }
    }

    /// e.g. "2 node(s) x 2 GPU rank(s) sharing 1 GPU, Gloo".
    pub fn describe(self, nodes: usize, ranks_per_node: usize) -> String {
        match self {
            Placement::Cpu => format!("{nodes} node(s) x {ranks_per_node} CPU rank(s), Gloo"),
            Placement::GpuPerRank => format!("{nodes} node(s) x {ranks_per_node} GPU rank(s), NCCL"),
            Placement::SharedGpus { gpus } => {
                format!("{nodes} node(s) x {ranks_per_node} GPU rank(s) sharing {gpus} GPU(s), Gloo")
            }
        }
    }
}

pub(super) fn gpus() -> usize {
    static GPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *GPUS.get_or_init(|| usize::try_from(tch::Cuda::device_count()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_share_the_gpus_when_there_are_too_few() {
        assert_eq!(placement(1, 2, 0), Placement::Cpu);
        assert_eq!(placement(1, 2, 2), Placement::GpuPerRank);
        assert_eq!(placement(1, 3, 1), Placement::SharedGpus { gpus: 1 });
        // Simulated nodes share one machine's GPUs.
        assert_eq!(placement(2, 2, 4), Placement::SharedGpus { gpus: 4 });
        let shared = placement(2, 2, 1);
        assert_eq!(shared.describe(2, 2), "2 node(s) x 2 GPU rank(s) sharing 1 GPU(s), Gloo");
        assert!(shared.options().contains(&"--share-gpus".to_string()));
        assert_eq!(placement(1, 2, 0).options(), ["--device", "cpu"]);
    }
}
