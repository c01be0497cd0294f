//! The workspace's one pseudo-random generator, for what must not depend on libtorch's:
//! the generated stand-in data set (the same images on every machine), the gaps
//! between dropped elements in the model's dropout (seeded from libtorch's generator),
//! and the checker's hidden variations.

/// SplitMix64: tiny, fast, and fully specified, so the stream is the same everywhere.
pub struct Rng(u64);

impl Rng {
    /// A generator whose stream is fixed by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n) (with SplitMix64's tiny modulo bias, fine for choosing).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in [0, 1), 24 bits.
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [lo, hi).
    pub(crate) fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }

    pub(crate) fn chance(&mut self, p: f32) -> bool {
        self.unit() < p
    }

    /// Roughly normal with mean 0 and standard deviation 1: the sum of four 16-bit
    /// uniforms, all cut from one draw (this runs once per lit pixel).
    pub(crate) fn normalish(&mut self) -> f32 {
        let r = self.next_u64();
        let sum = (r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48);
        (sum as f32 / 65536.0 - 2.0) * 1.732
    }

    /// Uniform in (0, 1], 53 bits: never 0, whose logarithm would be infinite.
    pub(crate) fn unit_open_closed(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
