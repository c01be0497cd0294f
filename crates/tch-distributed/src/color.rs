//! CPython's tuple hash, for PyTorch's communicator colors: Rust and Python ranks that
//! split one NCCL communicator must agree on the color.

/// PyTorch's `_process_group_color(ranks)`: `abs(hash(tuple(ranks))) % 2**31`, with
/// CPython's tuple hash (xxHash-based since 3.8; a small int hashes to itself), so that
/// Rust and Python ranks split a communicator with the same color.
pub(crate) fn process_group_color(ranks: &[usize]) -> i32 {
    const PRIME_1: u64 = 11_400_714_785_074_694_791;
    const PRIME_2: u64 = 14_029_467_366_897_019_727;
    const PRIME_5: u64 = 2_870_177_450_012_600_261;
    let mut acc = PRIME_5;
    for &rank in ranks {
        // CPython hashes an int modulo the Mersenne prime 2^61 - 1.
        let lane = (rank as u64) % ((1u64 << 61) - 1);
        acc = acc.wrapping_add(lane.wrapping_mul(PRIME_2));
        acc = acc.rotate_left(31);
        acc = acc.wrapping_mul(PRIME_1);
    }
    acc = acc.wrapping_add((ranks.len() as u64) ^ (PRIME_5 ^ 3_527_539));
    let hash = if acc == u64::MAX { 1_546_275_796 } else { acc as i64 };
    (hash.unsigned_abs() % (1u64 << 31)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The colors CPython 3.11's `abs(hash(tuple(ranks))) % 2**31` gives (PyTorch's
    /// `_process_group_color`), and, with the workspace's venv, Python's own answer.
    #[test]
    fn group_colors_are_pythons() {
        let known: [(&[usize], i32); 6] = [
            (&[0, 1], 2_130_503_744),
            (&[0, 3], 843_572_245),
            (&[1, 2, 5], 869_323_030),
            (&[0, 1, 2, 3, 4, 5, 6, 7], 1_266_629_538),
            (&[0], 59_908_776),
            (&[7], 874_688_206),
        ];
        for (ranks, color) in known {
            assert_eq!(process_group_color(ranks), color, "{ranks:?}");
        }
        let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
        if !python.exists() {
            return;
        }
        let lists: Vec<Vec<usize>> =
            vec![(0..64).collect(), vec![3, 9, 12], vec![0, 2, 4, 6], (5..37).collect()];
        for ranks in lists {
            let code = format!("print(abs(hash(tuple({ranks:?}))) % 2**31)");
            let out = std::process::Command::new(&python).args(["-c", &code]).output().expect("run python");
            let theirs: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("python's color");
            assert_eq!(process_group_color(&ranks), theirs, "{ranks:?}");
        }
    }
}
