//! `DistributedSampler` against PyTorch's own.
//!
//! `tests/fixtures/sampler_pytorch.jsonl` was written by `tests/fixtures/sampler_pytorch.py`
//! from torch 2.11's `torch.utils.data.distributed.DistributedSampler`; every case of its
//! grid is recomputed here and must agree in length, first 16 indices and a hash of all
//! indices. The hash is 64-bit FNV-1a over the indices each written as 8 little-endian
//! bytes: `h = 0xcbf29ce484222325; for every byte b: h = (h ^ b) * 0x100000001b3 (mod 2^64)`.
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use tch_distributed::{DistributedSampler, ErrorKind, SamplerOptions};

// The grid, as in sampler_pytorch.py.
const NS: [usize; 5] = [1, 7, 10, 1000, 60000];
const REPLICAS: [usize; 5] = [1, 2, 3, 4, 8];
const SEEDS: [u64; 4] = [0, 1, 42, (1 << 32) + 1];
const EPOCHS: [u64; 3] = [0, 1, 5];
const HEAD: usize = 16;
/// (case, rank) pairs in the grid: 5 N x (1+2+3+4+8) ranks x 2 drop_last x 2 shuffle x 4 seeds x 3 epochs.
const GRID_PAIRS: usize = 4320;
/// Lines in the fixture: unshuffled cases are recorded once, not per seed and epoch.
const FIXTURE_LINES: usize = 2340;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures")
}

fn fnv1a_u64_le(indices: &[usize]) -> u64 {
    use std::hash::Hasher;
    let mut h = fnv::FnvHasher::default();
    for &i in indices {
        h.write(&(i as u64).to_le_bytes());
    }
    h.finish()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Case {
    n: usize,
    replicas: usize,
    seed: u64,
    epoch: u64,
    shuffle: bool,
    drop_last: bool,
    rank: usize,
}

#[derive(Debug)]
struct Expected {
    len: usize,
    head: Vec<usize>,
    fnv: u64,
}

/// A value in the fixture's flat JSON objects.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Int(u64),
    Bool(bool),
    Str(String),
    Ints(Vec<u64>),
}

/// Parses one fixture line: a flat JSON object whose values are unsigned integers,
/// booleans, plain strings (no escapes) or arrays of unsigned integers. Enough for the
/// file the generator writes, and strict: anything else is a panic naming the line.
fn parse_line(line: &str, lineno: usize) -> HashMap<String, Value> {
    struct P<'a> {
        s: &'a [u8],
        i: usize,
        lineno: usize,
    }
    impl P<'_> {
        fn fail(&self, what: &str) -> ! {
            panic!("fixture line {}: {what} at byte {}", self.lineno, self.i)
        }
        fn eat(&mut self, c: u8) {
            if self.s.get(self.i) != Some(&c) {
                self.fail(&format!("expected '{}'", c as char));
            }
            self.i += 1;
        }
        fn peek(&self) -> Option<u8> {
            self.s.get(self.i).copied()
        }
        fn int(&mut self) -> u64 {
            let start = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            std::str::from_utf8(&self.s[start..self.i])
                .unwrap()
                .parse()
                .unwrap_or_else(|_| self.fail("expected an unsigned integer"))
        }
        fn string(&mut self) -> String {
            self.eat(b'"');
            let start = self.i;
            while self.peek().is_some_and(|c| c != b'"' && c != b'\\') {
                self.i += 1;
            }
            let text = std::str::from_utf8(&self.s[start..self.i]).unwrap().to_string();
            self.eat(b'"');
            text
        }
        fn value(&mut self) -> Value {
            match self.peek() {
                Some(b'"') => Value::Str(self.string()),
                Some(b't') if self.s[self.i..].starts_with(b"true") => {
                    self.i += 4;
                    Value::Bool(true)
                }
                Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                    self.i += 5;
                    Value::Bool(false)
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut items = Vec::new();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                        return Value::Ints(items);
                    }
                    loop {
                        items.push(self.int());
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Value::Ints(items);
                            }
                            _ => self.fail("expected ',' or ']'"),
                        }
                    }
                }
                _ => Value::Int(self.int()),
            }
        }
    }
    let mut p = P { s: line.trim().as_bytes(), i: 0, lineno };
    let mut map = HashMap::new();
    p.eat(b'{');
    loop {
        let key = p.string();
        p.eat(b':');
        let value = p.value();
        if map.insert(key.clone(), value).is_some() {
            p.fail(&format!("duplicate key {key}"));
        }
        match p.peek() {
            Some(b',') => p.i += 1,
            Some(b'}') => {
                p.i += 1;
                break;
            }
            _ => p.fail("expected ',' or '}'"),
        }
    }
    if p.i != p.s.len() {
        p.fail("trailing text");
    }
    map
}

fn load_fixture() -> HashMap<Case, Expected> {
    let path = fixtures_dir().join("sampler_pytorch.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {}: {e}; regenerate it with tests/fixtures/sampler_pytorch.py", path.display())
    });
    let mut out = HashMap::new();
    for (k, line) in text.lines().enumerate() {
        let lineno = k + 1;
        let mut map = parse_line(line, lineno);
        let mut take =
            |key: &str| map.remove(key).unwrap_or_else(|| panic!("fixture line {lineno}: no \"{key}\""));
        let int = |v: Value| match v {
            Value::Int(i) => i,
            other => panic!("fixture line {lineno}: expected an integer, got {other:?}"),
        };
        let boolean = |v: Value| match v {
            Value::Bool(b) => b,
            other => panic!("fixture line {lineno}: expected a boolean, got {other:?}"),
        };
        let case = Case {
            n: int(take("n")) as usize,
            replicas: int(take("replicas")) as usize,
            seed: int(take("seed")),
            epoch: int(take("epoch")),
            shuffle: boolean(take("shuffle")),
            drop_last: boolean(take("drop_last")),
            rank: int(take("rank")) as usize,
        };
        let len = int(take("len")) as usize;
        let head = match take("head") {
            Value::Ints(v) => v.into_iter().map(|i| i as usize).collect(),
            other => panic!("fixture line {lineno}: expected an array, got {other:?}"),
        };
        let fnv = match take("fnv") {
            Value::Str(s) if s.len() == 16 => u64::from_str_radix(&s, 16)
                .unwrap_or_else(|e| panic!("fixture line {lineno}: bad fnv {s:?}: {e}")),
            other => panic!("fixture line {lineno}: expected 16 hex digits, got {other:?}"),
        };
        assert!(map.is_empty(), "fixture line {lineno}: unexpected keys {:?}", map.keys());
        let previous = out.insert(case, Expected { len, head, fnv });
        assert!(previous.is_none(), "fixture line {lineno}: case {case:?} appears twice");
    }
    out
}

/// Every (case, rank) pair of the grid.
fn grid() -> Vec<Case> {
    let mut cases = Vec::new();
    for n in NS {
        for replicas in REPLICAS {
            for shuffle in [false, true] {
                for drop_last in [false, true] {
                    for seed in SEEDS {
                        for epoch in EPOCHS {
                            for rank in 0..replicas {
                                cases.push(Case { n, replicas, seed, epoch, shuffle, drop_last, rank });
                            }
                        }
                    }
                }
            }
        }
    }
    cases
}

fn sampler_for(case: &Case) -> DistributedSampler {
    let mut s = DistributedSampler::new(
        case.n,
        case.replicas,
        case.rank,
        SamplerOptions { shuffle: case.shuffle, seed: case.seed, drop_last: case.drop_last },
    )
    .unwrap();
    s.set_epoch(case.epoch);
    s
}

#[test]
fn matches_pytorch_over_the_whole_grid() {
    let fixture = load_fixture();
    assert_eq!(fixture.len(), FIXTURE_LINES, "the fixture is incomplete or from another grid");
    let mut used = HashSet::new();
    let mut checked = 0;
    for case in grid() {
        // Unshuffled, PyTorch ignores seed and epoch (the generator asserts it), so those
        // cases are recorded once, under seed 0 and epoch 0.
        let key = if case.shuffle { case } else { Case { seed: 0, epoch: 0, ..case } };
        let expected = fixture.get(&key).unwrap_or_else(|| panic!("the fixture has no line for {key:?}"));
        used.insert(key);
        let sampler = sampler_for(&case);
        let got = sampler.indices();
        assert_eq!(sampler.len(), expected.len, "len() for {case:?}");
        assert_eq!(got.len(), expected.len, "number of indices for {case:?}");
        assert_eq!(&got[..got.len().min(HEAD)], &expected.head[..], "first indices for {case:?}");
        assert_eq!(
            format!("{:016x}", fnv1a_u64_le(&got)),
            format!("{:016x}", expected.fnv),
            "FNV-1a of all the indices for {case:?}"
        );
        if case.n <= 1000 {
            // (Skipped for the largest N only to keep the debug-build test quick.)
            assert_eq!((&sampler).into_iter().collect::<Vec<_>>(), got, "iteration for {case:?}");
        }
        checked += 1;
    }
    assert_eq!(checked, GRID_PAIRS);
    assert_eq!(used.len(), fixture.len(), "some fixture lines belong to no case of the grid");
}

#[test]
fn fnv_agrees_with_the_generator() {
    // The generator asserts the same two values.
    assert_eq!(fnv1a_u64_le(&[]), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a_u64_le(&[0]), 0xa8c7_f832_281a_39c5);
}

#[test]
fn known_randperm_values() {
    let perm = |seed| {
        DistributedSampler::new(10, 1, 0, SamplerOptions { seed, ..SamplerOptions::default() })
            .unwrap()
            .indices()
    };
    assert_eq!(perm(0), vec![4, 1, 7, 5, 3, 9, 0, 8, 6, 2]);
    assert_eq!(perm(1), vec![5, 6, 1, 2, 0, 8, 9, 3, 7, 4]);
    // Only the low 32 bits of the seed reach MT19937.
    assert_eq!(perm((1 << 32) + 1), perm(1));
    // seed + epoch is what seeds the generator.
    let mut s = DistributedSampler::new(10, 1, 0, SamplerOptions::default()).unwrap();
    s.set_epoch(1);
    assert_eq!(s.indices(), perm(1));
    // Wrapping, like the low 32 bits of the true sum.
    let mut s =
        DistributedSampler::new(10, 1, 0, SamplerOptions { seed: u64::MAX, ..SamplerOptions::default() })
            .unwrap();
    s.set_epoch(2);
    assert_eq!(s.indices(), perm(1));
}

#[test]
fn ranks_partition_the_dataset() {
    for n in NS.into_iter().chain([0, 2, 5, 17]) {
        for replicas in REPLICAS {
            for shuffle in [false, true] {
                for drop_last in [false, true] {
                    let shares: Vec<Vec<usize>> = (0..replicas)
                        .map(|rank| {
                            let mut s = DistributedSampler::new(
                                n,
                                replicas,
                                rank,
                                SamplerOptions { shuffle, seed: 7, drop_last },
                            )
                            .unwrap();
                            s.set_epoch(3);
                            s.indices()
                        })
                        .collect();
                    let what =
                        format!("n {n}, replicas {replicas}, shuffle {shuffle}, drop_last {drop_last}");
                    let len = shares[0].len();
                    assert!(shares.iter().all(|s| s.len() == len), "unequal shares: {what}");
                    let mut counts = vec![0usize; n];
                    for &i in shares.iter().flatten() {
                        assert!(i < n, "index {i} out of range: {what}");
                        counts[i] += 1;
                    }
                    if drop_last {
                        // Disjoint; only the uneven tail (< replicas items) is left out.
                        assert_eq!(len, n / replicas, "{what}");
                        assert!(counts.iter().all(|&c| c <= 1), "a repeated index: {what}");
                        assert_eq!(counts.iter().filter(|&&c| c == 0).count(), n % replicas, "{what}");
                    } else {
                        // Everything is covered; padding repeats the order from its start,
                        // cycling when it is longer than the dataset (n < replicas).
                        assert_eq!(len, n.div_ceil(replicas), "{what}");
                        assert!(counts.iter().all(|&c| c >= 1), "an index never taken: {what}");
                        // Interleave the shares back into the padded global list: its
                        // first n entries are a permutation (checked by the counts), and
                        // every later entry repeats the one n places before it.
                        let padded: Vec<usize> =
                            (0..len * replicas).map(|p| shares[p % replicas][p / replicas]).collect();
                        for p in n..padded.len() {
                            assert_eq!(padded[p], padded[p - n], "padding at position {p}: {what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn fewer_items_than_ranks() {
    // Like PyTorch: drop_last leaves every rank empty; otherwise every rank is padded
    // to one item by cycling through the dataset.
    for rank in 0..8 {
        let s = DistributedSampler::new(
            3,
            8,
            rank,
            SamplerOptions { shuffle: false, drop_last: true, ..SamplerOptions::default() },
        )
        .unwrap();
        assert!(s.is_empty());
        assert_eq!(s.total_size(), 0);
        assert!(s.indices().is_empty());
        let s = DistributedSampler::new(
            3,
            8,
            rank,
            SamplerOptions { shuffle: false, ..SamplerOptions::default() },
        )
        .unwrap();
        assert_eq!(s.indices(), vec![rank % 3]);
    }
}

#[test]
fn shuffled_order_changes_per_epoch() {
    let mut s = DistributedSampler::new(1000, 4, 2, SamplerOptions { seed: 42, ..SamplerOptions::default() })
        .unwrap();
    let mut seen = HashSet::new();
    for epoch in 0..10 {
        s.set_epoch(epoch);
        assert_eq!(s.epoch(), epoch);
        let order = s.indices();
        assert_eq!(order, s.indices(), "the same epoch must give the same order");
        assert!(seen.insert(order), "epoch {epoch} repeated an earlier order");
    }
    let mut u = DistributedSampler::new(
        1000,
        4,
        2,
        SamplerOptions { shuffle: false, seed: 42, ..SamplerOptions::default() },
    )
    .unwrap();
    let first = u.indices();
    u.set_epoch(5);
    assert_eq!(u.indices(), first, "without shuffle the order never changes");
    assert_eq!(first, (2..1000).step_by(4).collect::<Vec<_>>());
}

#[test]
fn iterates_like_the_lab() {
    let mut sampler = DistributedSampler::with_defaults(10, 2, 1).unwrap();
    sampler.set_epoch(0);
    let mut taken = Vec::new();
    for idx in &sampler {
        taken.push(idx);
    }
    assert_eq!(taken, sampler.iter().collect::<Vec<_>>());
    assert_eq!(taken.len(), sampler.len());
    assert_eq!(
        (sampler.dataset_len(), sampler.num_replicas(), sampler.rank(), sampler.total_size()),
        (10, 2, 1, 10)
    );
}

#[test]
fn invalid_arguments_are_explained() {
    let err = DistributedSampler::new(10, 0, 0, SamplerOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("num_replicas is 0"), "{err}");
    assert!(err.message().contains("at least 1"), "{err}");

    let err = DistributedSampler::new(10, 4, 4, SamplerOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("rank 4"), "{err}");
    assert!(err.message().contains("num_replicas 4"), "{err}");
    assert!(err.message().contains("0..=3"), "{err}");
}

/// Re-runs the generator with the workspace's torch and demands the checked-in fixture
/// byte for byte, proving it comes from PyTorch. Skipped (with a note) when the
/// workspace has no `.venv/bin/python`.
#[test]
fn fixture_regenerates_from_pytorch_or_skips_without_venv() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..");
    let python = root.join(".venv").join("bin").join("python");
    if !python.exists() {
        // scripts/test.sh installs torch first: there, a missing venv is a failure.
        assert!(
            std::env::var_os("DDP_LAB_REQUIRE_TORCH").is_none(),
            "{} is missing although DDP_LAB_REQUIRE_TORCH is set: run scripts/setup.sh",
            python.display()
        );
        eprintln!("SKIPPED: {} not found, so the fixture was not regenerated from torch", python.display());
        return;
    }
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let out = std::env::temp_dir().join(format!("sampler_pytorch-{}-{stamp}.jsonl", std::process::id()));
    let status = Command::new(&python)
        .arg(fixtures_dir().join("sampler_pytorch.py"))
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let fresh = std::fs::read(&out);
    let _ = std::fs::remove_file(&out);
    assert!(status.success(), "the generator failed: {status}");
    let checked_in = std::fs::read(fixtures_dir().join("sampler_pytorch.jsonl")).unwrap();
    assert!(
        fresh.unwrap() == checked_in,
        "torch now produces a different fixture: rerun tests/fixtures/sampler_pytorch.py and review the diff"
    );
}
