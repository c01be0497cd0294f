//! Where a run's ranks compute (CPU, a GPU each, or shared GPUs) and the options that ask
//! for it.

use labkit::Placement;

/// Where the ranks of each node of a run compute, by labkit's placement rule (the
/// programs' own) applied to the GPUs the node sees ([`node_gpus`]): a GPU per rank when
/// there is one for each, shared GPUs when there are fewer, the CPU without GPUs.
/// Simulated nodes share this machine; with fewer GPUs than nodes they all see every
/// GPU, and their ranks share them over Gloo when they outnumber them, or use the CPU
/// when they do not (the programs would then choose NCCL, which refuses two ranks of
/// one job on one GPU).
pub fn placement(nodes: usize, ranks_per_node: usize, gpus: usize) -> Placement {
    match node_gpus(0, nodes, gpus) {
        Some(own) => Placement::for_gpus(ranks_per_node, own.len()),
        None if nodes == 1 || ranks_per_node > gpus => Placement::for_gpus(ranks_per_node, gpus),
        None => Placement::Cpu,
    }
}

/// The GPUs simulated node `node` of `nodes` sees (positions among this machine's):
/// its own equal share, as a real node has its own GPUs, so that two nodes' local rank
/// 0 never land on one GPU. `None`: every GPU (one node, or fewer GPUs than nodes).
pub fn node_gpus(node: usize, nodes: usize, gpus: usize) -> Option<std::ops::Range<usize>> {
    let share = gpus / nodes.max(1);
    (nodes > 1 && share > 0).then(|| node * share..(node + 1) * share)
}

/// `CUDA_VISIBLE_DEVICES` for a node that sees `own` of this machine's GPUs: their
/// positions, or the entries at those positions of the checker's own
/// `CUDA_VISIBLE_DEVICES` when it has one (e.g. "2,3" makes position 0 GPU 2).
pub(super) fn visible_devices(own: std::ops::Range<usize>) -> String {
    let outer = std::env::var("CUDA_VISIBLE_DEVICES").ok().filter(|v| !v.trim().is_empty());
    let outer: Option<Vec<String>> = outer.map(|v| v.split(',').map(|d| d.trim().to_string()).collect());
    own.map(|i| outer.as_ref().and_then(|o| o.get(i).cloned()).unwrap_or_else(|| i.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

/// e.g. "2 node(s) x 2 GPU rank(s) sharing 1 GPU, Gloo".
pub fn describe_placement(placement: Placement, nodes: usize, ranks_per_node: usize) -> String {
    match placement {
        Placement::Cpu => format!("{nodes} node(s) x {ranks_per_node} CPU rank(s), Gloo"),
        Placement::GpuPerRank => format!("{nodes} node(s) x {ranks_per_node} GPU rank(s), NCCL"),
        Placement::SharedGpus { gpus } => {
            format!("{nodes} node(s) x {ranks_per_node} GPU rank(s) sharing {gpus} GPU(s), Gloo")
        }
    }
}

/// The GPUs libtorch sees here, asked once.
pub(super) fn gpus() -> usize {
    static GPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *GPUS.get_or_init(labkit::gpu_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_share_the_gpus_when_there_are_too_few() {
        assert_eq!(placement(1, 2, 0), Placement::Cpu);
        assert_eq!(placement(1, 2, 2), Placement::GpuPerRank);
        assert_eq!(placement(1, 3, 1), Placement::SharedGpus { gpus: 1 });
        // Simulated nodes share one machine's GPUs: each sees its own share of them.
        assert_eq!(placement(2, 2, 4), Placement::GpuPerRank);
        assert_eq!((node_gpus(0, 2, 4), node_gpus(1, 2, 4)), (Some(0..2), Some(2..4)));
        let shared = placement(2, 2, 1);
        assert_eq!(describe_placement(shared, 2, 2), "2 node(s) x 2 GPU rank(s) sharing 1 GPU(s), Gloo");
        assert!(shared.options().contains(&"--share-gpus".to_string()));
        assert_eq!(placement(1, 2, 0).options(), ["--device", "cpu"]);
    }

    /// Every rank of a run where the programs put it, given the options the checker
    /// passes and the GPUs each node sees: (node, device of the machine or None for the
    /// CPU) per rank, and the backend.
    fn ranks_placed(
        nodes: usize,
        ranks_per_node: usize,
        gpus: usize,
    ) -> (Vec<Option<usize>>, tch_distributed::Backend) {
        let expected = placement(nodes, ranks_per_node, gpus);
        let options = expected.options();
        let request = labkit::GpuRequest {
            device: if options[1] == "cpu" { labkit::DeviceChoice::Cpu } else { labkit::DeviceChoice::Cuda },
            share_gpus: options.iter().any(|o| o == "--share-gpus"),
            ranks: ranks_per_node,
        };
        let mut devices = Vec::new();
        let mut backends = Vec::new();
        for node in 0..nodes {
            let own = node_gpus(node, nodes, gpus).unwrap_or(0..gpus);
            let program = Placement::of_node(request, own.len()).unwrap();
            assert_eq!(program, expected, "{nodes} x {ranks_per_node} ranks, {gpus} GPUs: node {node}");
            backends.push(program.backend());
            for local in 0..ranks_per_node {
                devices.push(match program.device(local) {
                    tch::Device::Cuda(i) => Some(own.clone().nth(i).unwrap()),
                    _ => None,
                });
            }
        }
        backends.dedup();
        assert_eq!(backends.len(), 1, "every node of a job on one backend");
        (devices, backends[0])
    }

    #[test]
    fn the_programs_place_ranks_as_the_checker_describes_and_nccl_never_sees_a_gpu_twice() {
        for gpus in [0, 1, 2, 3, 4, 8] {
            for (nodes, ranks_per_node) in [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)] {
                let (devices, backend) = ranks_placed(nodes, ranks_per_node, gpus);
                let what = format!("{nodes} x {ranks_per_node} ranks, {gpus} GPUs: {devices:?}");
                if backend == tch_distributed::Backend::Nccl {
                    let mut used: Vec<usize> = devices.iter().map(|d| d.unwrap()).collect();
                    used.sort();
                    used.dedup();
                    assert_eq!(used.len(), devices.len(), "NCCL with two ranks on one GPU: {what}");
                }
                // GPUs are used whenever the ranks can be placed on them.
                let on_gpus = devices.iter().all(Option::is_some);
                assert_eq!(on_gpus, gpus > 0 && !(nodes > gpus && ranks_per_node <= gpus), "{what}");
            }
        }
    }

    #[test]
    fn a_simulated_node_sees_its_share_of_the_gpus_the_checker_sees() {
        assert_eq!(node_gpus(0, 1, 8), None);
        assert_eq!(node_gpus(1, 2, 3), Some(1..2));
        assert_eq!(node_gpus(1, 2, 1), None);
        // Positions, unless the checker itself was given GPUs (read from the environment,
        // so only checked when the test's environment sets nothing).
        if std::env::var_os("CUDA_VISIBLE_DEVICES").is_none() {
            assert_eq!(visible_devices(2..4), "2,3");
        }
    }
}
