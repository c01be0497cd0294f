//! A generated stand-in for Fashion-MNIST, for machines that cannot download it.
//!
//! Same files, format and classes as the real set: each image is a garment
//! silhouette of its class (polygons in a unit box) placed into 28×28 with a random
//! size, aspect, position, small rotation, fill intensity, texture and noise. The
//! classes are built to be confusable the way the real ones are (shirt vs T-shirt vs
//! pullover vs coat; sandal vs sneaker vs ankle boot), so a linear model stays well
//! short of 100% while a small CNN learns the set in a few epochs.
//!
//! The output is a pure function of the seed: every sample draws from its own
//! SplitMix64 stream derived from (seed, split, index), which also lets the samples
//! be drawn in parallel without changing a byte; and the drawing uses only
//! `+ - * /` on `f32` (no `sin`/`cos` from the platform's libm, whose last bits vary
//! between systems), so the pixels are the same on every machine.

use std::collections::BTreeMap;
use std::path::Path;

use super::fsutil::{self, DirLock};
use super::idx::{self, PIXELS, SIDE};
use super::manifest::{md5_hex, Manifest};
use super::{DataError, TEST_IMAGES, TEST_LABELS, TRAIN_IMAGES, TRAIN_LABELS};
use crate::rng::Rng;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Training images (60,000 in the real set).
    pub train: usize,
    /// Test images (10,000 in the real set).
    pub test: usize,
    /// Everything generated is a function of this seed.
    pub seed: u64,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { train: 60_000, test: 10_000, seed: 0 }
    }
}

impl GenerateOptions {
    /// The subdirectory a data directory keeps this stand-in in,
    /// `generated-seed<seed>-<train>-<test>`: distinct sets never share files, and
    /// never mix with the real data.
    pub fn dir_name(&self) -> String {
        format!("generated-seed{}-{}-{}", self.seed, self.train, self.test)
    }

    fn describe(&self) -> String {
        format!("seed={} train={} test={}", self.seed, self.train, self.test)
    }
}

/// Generates the stand-in into `dir` (created if needed): the four gz IDX files,
/// each written atomically, then the manifest `fashion-mnist.md5` that lists their
/// MD5s. Holds the lock of `dir` meanwhile. Returns the manifest.
pub fn generate(dir: &Path, options: &GenerateOptions) -> Result<Manifest, DataError> {
    let _lock = DirLock::acquire(dir)?;
    generate_locked(dir, options)
}

/// [`generate`] for a caller that holds the lock of `dir`.
pub(crate) fn generate_locked(dir: &Path, options: &GenerateOptions) -> Result<Manifest, DataError> {
    if options.train == 0 || options.test == 0 {
        return Err(DataError::InvalidOption(format!(
            "the generated stand-in needs at least one training and one test image (got train={}, test={})",
            options.train, options.test
        )));
    }
    if options.train > u32::MAX as usize || options.test > u32::MAX as usize {
        return Err(DataError::InvalidOption("an IDX file holds at most 2^32-1 images".to_string()));
    }
    fsutil::create_dir(dir)?;
    fsutil::remove_stale_temp_files(dir);
    // The manifest goes first and last: removing it first means a crash part-way
    // leaves a directory that is seen as incomplete, never one whose old manifest
    // vouches for a mix of old and new files.
    let manifest_path = dir.join(super::MANIFEST_FILE);
    if manifest_path.exists() {
        std::fs::remove_file(&manifest_path).map_err(|e| DataError::io("remove", &manifest_path, e))?;
    }
    let mut entries = BTreeMap::new();
    for (split, n, images_name, labels_name) in
        [(0u64, options.train, TRAIN_IMAGES, TRAIN_LABELS), (1, options.test, TEST_IMAGES, TEST_LABELS)]
    {
        let (pixels, labels) = generate_split(options.seed, split, n);
        // Each file's MD5 as stored and of its content (see `Manifest`).
        let (images, labels) = std::thread::scope(|s| {
            let images = s.spawn(|| {
                let raw = idx::raw_images(&pixels);
                (idx::gzip(&raw), md5_hex(&raw))
            });
            let raw = idx::raw_labels(&labels);
            let labels = (idx::gzip(&raw), md5_hex(&raw));
            (images.join().expect("encoder thread"), labels)
        });
        for (name, (gz, content_md5)) in [(images_name, images), (labels_name, labels)] {
            fsutil::write_atomic(dir, name, &gz)?;
            entries.insert(name.to_string(), (md5_hex(&gz), content_md5));
        }
    }
    let manifest = Manifest::generated(entries, &options.describe());
    manifest.write(dir)?;
    Ok(manifest)
}

/// Pixels (`n * 784`) and labels (`n`) of one split; `split` is 0 for train, 1 for test.
/// The labels are exactly balanced (class counts differ by at most one) and shuffled.
pub fn generate_split(seed: u64, split: u64, n: usize) -> (Vec<u8>, Vec<u8>) {
    let mut labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
    let mut rng = Rng::new(mix(seed, split, u64::MAX));
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        labels.swap(i, j);
    }
    let mut pixels = vec![0u8; n * PIXELS];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).clamp(1, 8);
    let per = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (chunk_no, (out, labs)) in pixels.chunks_mut(per * PIXELS).zip(labels.chunks(per)).enumerate() {
            s.spawn(move || {
                for (k, (img, &label)) in out.chunks_mut(PIXELS).zip(labs).enumerate() {
                    let index = (chunk_no * per + k) as u64;
                    draw(label, &mut Rng::new(mix(seed, split, index)), img);
                }
            });
        }
    });
    (pixels, labels)
}

/// Derives the seed of one stream from (seed, split, index).
fn mix(seed: u64, split: u64, index: u64) -> u64 {
    let mut r = Rng::new(seed ^ 0x6c61_626b_6974_u64);
    let a = r.next_u64() ^ split.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut r = Rng::new(a);
    r.next_u64() ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03)
}

type Poly = Vec<(f32, f32)>;

/// How a garment is coloured: a base intensity modulated by stripes or checks and
/// a vertical gradient, evaluated per pixel.
#[derive(Clone, Copy)]
struct Shade {
    base: f32,
    amp: f32,
    period: f32,
    phase: f32,
    pattern: u8, // 0 plain, 1 horizontal stripes, 2 vertical stripes, 3 checks
    gradient: f32,
}

impl Shade {
    fn random(rng: &mut Rng, pattern_chance: f32) -> Shade {
        let pattern = if rng.chance(pattern_chance) { 1 + rng.below(3) as u8 } else { 0 };
        Shade {
            base: rng.range(0.35, 1.0),
            amp: rng.range(0.15, 0.5),
            period: rng.range(2.0, 5.0),
            phase: rng.range(0.0, 5.0),
            pattern,
            gradient: rng.range(-0.35, 0.35),
        }
    }

    /// A plain shade that stands out from this one: darker on a light garment,
    /// lighter on a dark one.
    fn contrasting(self, amount: f32) -> Shade {
        if self.base > 0.55 {
            self.scaled(1.0 - amount)
        } else {
            self.scaled(1.0 + 1.5 * amount)
        }
    }

    fn scaled(self, factor: f32) -> Shade {
        Shade { base: (self.base * factor).clamp(0.0, 1.0), pattern: 0, ..self }
    }

    fn at(&self, x: f32, y: f32) -> f32 {
        let wave = |t: f32| {
            let f = ((t + self.phase) / self.period).rem_euclid(1.0);
            if f < 0.5 {
                1.0
            } else {
                0.0
            }
        };
        let pattern = match self.pattern {
            1 => wave(y),
            2 => wave(x),
            3 => (wave(x) + wave(y)) * 0.5,
            _ => 0.0,
        };
        let v = self.base * (1.0 - self.amp * pattern) * (1.0 + self.gradient * (y - 14.0) / 14.0);
        v.clamp(0.0, 1.0)
    }
}

/// The 28×28 image under construction, in [0, 1], with a scratch coverage buffer.
struct Canvas {
    px: [f32; PIXELS],
    cov: [f32; PIXELS],
    /// Unit garment coordinates (centre 0, extent ±0.5) → pixel coordinates.
    m: [f32; 6],
}

/// Sub-scanlines per pixel row: vertical anti-aliasing.
const SUB: usize = 3;

impl Canvas {
    fn to_px(&self, (u, v): (f32, f32)) -> (f32, f32) {
        let m = &self.m;
        (m[0] * u + m[1] * v + m[2], m[3] * u + m[4] * v + m[5])
    }

    /// Paints the polygon (unit coordinates) with `shade`, anti-aliased: coverage of
    /// each pixel is measured on `SUB` scanlines with exact horizontal span overlap,
    /// and the shade is blended in by coverage.
    fn fill(&mut self, poly: &[(f32, f32)], shade: &Shade) {
        let pts: Vec<(f32, f32)> = poly.iter().map(|&p| self.to_px(p)).collect();
        let (mut x_min, mut x_max, mut y_min, mut y_max) = (f32::MAX, f32::MIN, f32::MAX, f32::MIN);
        for &(x, y) in &pts {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            y_min = y_min.min(y);
            y_max = y_max.max(y);
        }
        // The pixel box the polygon can touch; nothing outside it is visited.
        let row_lo = (y_min.max(0.0) as usize).min(SIDE);
        let row_hi = ((y_max.max(0.0) as usize) + 1).min(SIDE);
        let col_lo = (x_min.max(0.0) as usize).min(SIDE);
        let col_hi = ((x_max.max(0.0) as usize) + 1).min(SIDE);
        if row_lo >= row_hi || col_lo >= col_hi {
            return;
        }
        for row in row_lo..row_hi {
            self.cov[row * SIDE + col_lo..row * SIDE + col_hi].fill(0.0);
        }
        let mut xs: Vec<f32> = Vec::with_capacity(16);
        for row in row_lo..row_hi {
            for sub in 0..SUB {
                let y = row as f32 + (sub as f32 + 0.5) / SUB as f32;
                xs.clear();
                for i in 0..pts.len() {
                    let (x0, y0) = pts[i];
                    let (x1, y1) = pts[(i + 1) % pts.len()];
                    if (y0 <= y) != (y1 <= y) {
                        xs.push(x0 + (y - y0) * (x1 - x0) / (y1 - y0));
                    }
                }
                xs.sort_by(f32::total_cmp);
                for pair in xs.chunks_exact(2) {
                    let (a, b) = (pair[0].clamp(0.0, SIDE as f32), pair[1].clamp(0.0, SIDE as f32));
                    if b <= a {
                        continue;
                    }
                    let (ca, cb) = (a as usize, (b as usize).min(SIDE - 1));
                    for col in ca..=cb {
                        let lo = a.max(col as f32);
                        let hi = b.min(col as f32 + 1.0);
                        if hi > lo {
                            self.cov[row * SIDE + col] += (hi - lo) / SUB as f32;
                        }
                    }
                }
            }
        }
        for row in row_lo..row_hi {
            for col in col_lo..col_hi {
                let i = row * SIDE + col;
                let c = self.cov[i].min(1.0);
                if c > 0.0 {
                    let v = shade.at(col as f32 + 0.5, row as f32 + 0.5);
                    self.px[i] = self.px[i] * (1.0 - c) + v * c;
                }
            }
        }
    }
}

/// A quadrilateral band of half-thickness `t` from `a` to `b`.
fn bar(a: (f32, f32), b: (f32, f32), t: f32) -> Poly {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let len = (dx * dx + dy * dy).sqrt().max(1e-6);
    let (nx, ny) = (-dy / len * t, dx / len * t);
    vec![(a.0 + nx, a.1 + ny), (b.0 + nx, b.1 + ny), (b.0 - nx, b.1 - ny), (a.0 - nx, a.1 - ny)]
}

/// Mirrors a polygon about the vertical axis.
fn mirror(poly: &[(f32, f32)]) -> Poly {
    poly.iter().rev().map(|&(x, y)| (-x, y)).collect()
}

/// An arch (a bag's handle): a parabola from (-hw, base) up to (0, peak), `t` thick.
fn arch(hw: f32, base: f32, peak: f32, t: f32) -> Poly {
    const N: usize = 10;
    let point = |w: f32, p: f32, k: usize| {
        let x = -w + 2.0 * w * k as f32 / N as f32;
        let r = x / w;
        (x, p + (base - p) * r * r)
    };
    let mut poly: Poly = (0..=N).map(|k| point(hw + t, peak - t, k)).collect();
    poly.extend((0..=N).rev().map(|k| point(hw - t, peak + t, k)));
    poly
}

/// sin and cos of a small angle by their Taylor series (exact to f32 for |a| < 0.3).
fn sin_cos(a: f32) -> (f32, f32) {
    let a2 = a * a;
    (a * (1.0 - a2 / 6.0 * (1.0 - a2 / 20.0)), 1.0 - a2 / 2.0 * (1.0 - a2 / 12.0 * (1.0 - a2 / 30.0)))
}

/// Upper-body garments share a construction: a torso, two sleeves, a neckline.
struct Top {
    shoulder_y: f32,
    hem_y: f32,
    shoulder_hw: f32,
    hem_hw: f32,
    neck_hw: f32,
    neck_depth: f32,
    /// Sleeve length (0 = sleeveless), root width, and direction (dx, dy), unit length.
    sleeve: Option<(f32, f32, (f32, f32))>,
}

impl Top {
    fn torso(&self) -> Poly {
        let s = self;
        vec![
            (-s.neck_hw, s.shoulder_y),
            (0.0, s.shoulder_y + s.neck_depth),
            (s.neck_hw, s.shoulder_y),
            (s.shoulder_hw, s.shoulder_y + 0.03),
            (s.hem_hw, s.hem_y),
            (-s.hem_hw, s.hem_y),
            (-s.shoulder_hw, s.shoulder_y + 0.03),
        ]
    }

    /// The right sleeve (the left one is its mirror image): a band from the shoulder
    /// along the sleeve's direction, narrowing a little towards the cuff.
    fn sleeve(&self) -> Option<Poly> {
        let (len, width, (dx, dy)) = self.sleeve?;
        let root = (self.shoulder_hw - 0.01, self.shoulder_y + 0.03 + width * 0.5);
        let end = (root.0 + dx * len, root.1 + dy * len);
        let (nx, ny) = (-dy, dx);
        let (h0, h1) = (width * 0.5, width * 0.4);
        Some(vec![
            (root.0 + nx * h0, root.1 + ny * h0),
            (end.0 + nx * h1, end.1 + ny * h1),
            (end.0 - nx * h1, end.1 - ny * h1),
            (root.0 - nx * h0, root.1 - ny * h0),
        ])
    }

    fn draw(&self, c: &mut Canvas, shade: &Shade) {
        c.fill(&self.torso(), shade);
        if let Some(sleeve) = self.sleeve() {
            c.fill(&sleeve, shade);
            c.fill(&mirror(&sleeve), shade);
        }
    }
}

/// A unit vector pointing between `lo` and `hi` degrees away from straight down,
/// towards +x (outwards for a right sleeve).
fn direction(rng: &mut Rng, lo: f32, hi: f32) -> (f32, f32) {
    // Half the angle keeps the series exact; the double-angle formulas restore it.
    let (s, c) = sin_cos(rng.range(lo, hi) * 0.008_726_646);
    (2.0 * s * c, c * c - s * s)
}

fn draw(label: u8, rng: &mut Rng, out: &mut [u8]) {
    // Placement: the unit box maps to about 20-26 px, jittered and slightly rotated.
    let size = rng.range(21.0, 26.0);
    let aspect = rng.range(0.88, 1.12);
    let (s, co) = sin_cos(rng.range(-0.08, 0.08));
    let (cx, cy) = (14.0 + rng.range(-1.5, 1.5), 14.0 + rng.range(-1.5, 1.5));
    let (sx, sy) = (size * aspect, size / aspect);
    let mut c =
        Canvas { px: [0.0; PIXELS], cov: [0.0; PIXELS], m: [co * sx, -s * sy, cx, s * sx, co * sy, cy] };

    match label {
        0 => tshirt(&mut c, rng),
        1 => trouser(&mut c, rng),
        2 => pullover(&mut c, rng),
        3 => dress(&mut c, rng),
        4 => coat(&mut c, rng),
        5 => sandal(&mut c, rng),
        6 => shirt(&mut c, rng),
        7 => sneaker(&mut c, rng),
        8 => bag(&mut c, rng),
        _ => ankle_boot(&mut c, rng),
    }

    // Sensor-like noise on the garment only; the background stays black as in the
    // real data.
    let sigma = rng.range(0.0, 0.06);
    for (o, &v) in out.iter_mut().zip(c.px.iter()) {
        let v = if v > 0.02 { v + sigma * rng.normalish() } else { v };
        *o = (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8;
    }
}

fn tshirt(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.25);
    let shoulder_hw = rng.range(0.21, 0.28);
    let sleeveless = rng.chance(0.15);
    let top = Top {
        shoulder_y: rng.range(-0.42, -0.34),
        hem_y: rng.range(0.34, 0.44),
        shoulder_hw: if sleeveless { shoulder_hw * 0.8 } else { shoulder_hw },
        hem_hw: shoulder_hw * rng.range(0.95, 1.1),
        neck_hw: rng.range(0.08, 0.13),
        neck_depth: rng.range(0.04, 0.12),
        sleeve: (!sleeveless)
            .then(|| (rng.range(0.14, 0.24), rng.range(0.13, 0.18), direction(rng, 50.0, 70.0))),
    };
    top.draw(c, &shade);
    if rng.chance(0.35) {
        // A print on the chest.
        let (w, h) = (rng.range(0.06, 0.14), rng.range(0.05, 0.12));
        let y = rng.range(-0.2, 0.05);
        c.fill(&[(-w, y - h), (w, y - h), (w, y + h), (-w, y + h)], &shade.contrasting(rng.range(0.3, 0.6)));
    }
}

fn pullover(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.3);
    let shoulder_hw = rng.range(0.2, 0.26);
    let top = Top {
        shoulder_y: rng.range(-0.44, -0.38),
        hem_y: rng.range(0.32, 0.42),
        shoulder_hw,
        hem_hw: shoulder_hw * rng.range(0.88, 1.0),
        neck_hw: rng.range(0.07, 0.11),
        neck_depth: rng.range(0.03, 0.07),
        sleeve: Some((rng.range(0.62, 0.8), rng.range(0.11, 0.15), direction(rng, 14.0, 24.0))),
    };
    top.draw(c, &shade);
    // Ribbed bands at the hem and the cuffs.
    let band = shade.contrasting(rng.range(0.2, 0.4));
    let (y, w) = (top.hem_y, top.hem_hw);
    c.fill(&[(-w, y - 0.07), (w, y - 0.07), (w, y), (-w, y)], &band);
}

fn coat(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.15);
    let shoulder_hw = rng.range(0.23, 0.29);
    let top = Top {
        shoulder_y: rng.range(-0.48, -0.43),
        hem_y: rng.range(0.44, 0.49),
        shoulder_hw,
        hem_hw: shoulder_hw * rng.range(1.0, 1.15),
        neck_hw: rng.range(0.07, 0.11),
        neck_depth: rng.range(0.15, 0.32),
        sleeve: Some((rng.range(0.7, 0.88), rng.range(0.12, 0.16), direction(rng, 6.0, 14.0))),
    };
    top.draw(c, &shade);
    // The front opening: a dark line down the middle, below a V of lapels.
    let dark = shade.scaled(rng.range(0.2, 0.5));
    let v = top.shoulder_y + top.neck_depth;
    c.fill(&bar((0.0, v), (0.0, top.hem_y), rng.range(0.018, 0.03)), &dark);
    if rng.chance(0.6) {
        // Pockets.
        let y = rng.range(0.12, 0.28);
        let w = rng.range(0.06, 0.1);
        let x = top.hem_hw * 0.55;
        c.fill(&bar((x - w, y), (x + w, y), 0.018), &dark);
        c.fill(&bar((-x - w, y), (-x + w, y), 0.018), &dark);
    }
}

fn shirt(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.5);
    let shoulder_hw = rng.range(0.2, 0.26);
    let sleeve = if rng.chance(0.75) {
        (rng.range(0.55, 0.78), rng.range(0.11, 0.15), direction(rng, 8.0, 20.0))
    } else {
        (rng.range(0.14, 0.24), rng.range(0.12, 0.16), direction(rng, 45.0, 65.0))
    };
    let top = Top {
        shoulder_y: rng.range(-0.45, -0.38),
        hem_y: rng.range(0.36, 0.46),
        shoulder_hw,
        hem_hw: shoulder_hw * rng.range(0.92, 1.05),
        neck_hw: rng.range(0.05, 0.08),
        neck_depth: rng.range(0.05, 0.1),
        sleeve: Some(sleeve),
    };
    top.draw(c, &shade);
    // The button placket, with buttons, and collar points either side of the neck.
    let contrast = rng.range(0.25, 0.5);
    let line = shade.contrasting(contrast);
    let y0 = top.shoulder_y + top.neck_depth;
    c.fill(&bar((0.0, y0), (0.0, top.hem_y), rng.range(0.01, 0.016)), &line);
    let buttons = 3 + rng.below(3) as usize;
    for k in 0..buttons {
        let y = y0 + 0.06 + (top.hem_y - y0 - 0.1) * k as f32 / buttons as f32;
        c.fill(&bar((0.0, y - 0.018), (0.0, y + 0.018), 0.025), &line);
    }
    let (n, y) = (top.neck_hw, top.shoulder_y);
    let right = vec![(n - 0.01, y - 0.02), (n + 0.07, y + 0.01), (n * 0.2, y + top.neck_depth + 0.08)];
    let col = shade.contrasting(contrast * 0.8);
    c.fill(&right, &col);
    c.fill(&mirror(&right), &col);
}

fn dress(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.3);
    let y0 = rng.range(-0.48, -0.42);
    let top_hw = rng.range(0.1, 0.17);
    let waist_y = rng.range(-0.12, 0.02);
    let waist_hw = rng.range(0.08, 0.13);
    let hem_y = rng.range(0.42, 0.49);
    let hem_hw = rng.range(0.26, 0.4);
    let neck_hw = top_hw * rng.range(0.3, 0.7);
    let body = vec![
        (-top_hw, y0),
        (-neck_hw, y0),
        (0.0, y0 + rng.range(0.02, 0.1)),
        (neck_hw, y0),
        (top_hw, y0),
        (waist_hw, waist_y),
        (hem_hw, hem_y),
        (-hem_hw, hem_y),
        (-waist_hw, waist_y),
    ];
    c.fill(&body, &shade);
    if rng.chance(0.3) {
        let sleeve = bar((top_hw - 0.02, y0 + 0.05), (top_hw + 0.08, y0 + 0.15), 0.05);
        c.fill(&sleeve, &shade);
        c.fill(&mirror(&sleeve), &shade);
    }
    if rng.chance(0.4) {
        // A belt.
        let b = shade.scaled(rng.range(0.5, 1.4));
        c.fill(&bar((-waist_hw, waist_y), (waist_hw, waist_y), 0.025), &b);
    }
}

fn trouser(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.15);
    let top = rng.range(-0.49, -0.44);
    let waist_hw = rng.range(0.13, 0.2);
    let hem = rng.range(0.44, 0.49);
    let flare = rng.range(-0.03, 0.07);
    let crotch = rng.range(-0.15, 0.0);
    let gap = rng.range(0.015, 0.07);
    let body = vec![
        (-waist_hw, top),
        (waist_hw, top),
        (waist_hw + flare, hem),
        (gap, hem),
        (0.0, crotch),
        (-gap, hem),
        (-waist_hw - flare, hem),
    ];
    c.fill(&body, &shade);
    if rng.chance(0.5) {
        // Creases.
        let d = shade.scaled(rng.range(0.6, 0.85));
        let x = (waist_hw + gap) * 0.5;
        c.fill(&bar((x, crotch + 0.05), (x + flare * 0.5, hem), 0.01), &d);
        c.fill(&bar((-x, crotch + 0.05), (-x - flare * 0.5, hem), 0.01), &d);
    }
}

fn sandal(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.1);
    let sole_y = rng.range(0.12, 0.25);
    let heel = rng.range(0.0, 0.15);
    let th = rng.range(0.025, 0.06);
    // The sole, rising towards the heel at the right.
    c.fill(
        &[
            (-0.48, sole_y - th),
            (0.2, sole_y - th - heel),
            (0.47, sole_y - th - heel),
            (0.47, sole_y),
            (-0.48, sole_y + 0.02),
        ],
        &shade,
    );
    if heel > 0.06 {
        c.fill(&bar((0.4, sole_y - heel), (0.4, sole_y + 0.04), 0.03), &shade);
    }
    let straps = 2 + rng.below(4) as usize;
    let strap_t = rng.range(0.018, 0.04);
    let top_y = rng.range(-0.25, -0.05);
    for k in 0..straps {
        let x0 = -0.38 + 0.7 * (k as f32 + rng.range(0.0, 0.6)) / straps as f32;
        let lean = rng.range(0.05, 0.18);
        c.fill(
            &bar(
                (x0, sole_y - th - 0.3 * heel),
                (x0 + lean, top_y + 0.1 * k as f32 / straps as f32),
                strap_t,
            ),
            &shade,
        );
    }
    if rng.chance(0.6) {
        // The ankle strap.
        c.fill(&bar((0.05, top_y), (0.42, top_y - 0.04), strap_t), &shade);
    }
}

fn sneaker(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.15);
    let bottom = rng.range(0.18, 0.28);
    let top = rng.range(-0.22, -0.04);
    let toe = rng.range(0.0, 0.1);
    let body = vec![
        (-0.48, bottom),
        (-0.47, bottom - 0.12 - toe),
        (-0.25, bottom - 0.2 - toe),
        (-0.05, top + 0.08),
        (0.2, top),
        (0.44, top + 0.02),
        (0.48, bottom - 0.1),
        (0.48, bottom),
    ];
    c.fill(&body, &shade);
    // The sole, brighter or darker than the upper.
    let sole = shade.scaled(rng.range(0.5, 1.5));
    let st = rng.range(0.04, 0.08);
    c.fill(&[(-0.48, bottom - st), (0.48, bottom - st), (0.48, bottom), (-0.48, bottom)], &sole);
    if rng.chance(0.6) {
        // Laces.
        let d = shade.scaled(rng.range(0.4, 0.75));
        for k in 0..3 {
            let x = -0.2 + 0.08 * k as f32;
            let y = bottom - 0.22 - toe * 0.5 - 0.05 * k as f32;
            c.fill(&bar((x - 0.04, y + 0.03), (x + 0.04, y - 0.03), 0.012), &d);
        }
    }
}

fn ankle_boot(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.1);
    let bottom = rng.range(0.24, 0.32);
    let shaft_top = rng.range(-0.48, -0.3);
    let shaft_front = rng.range(-0.1, 0.05);
    let heel = rng.range(0.04, 0.12);
    let body = vec![
        (-0.48, bottom - heel * 0.5),
        (-0.46, bottom - 0.14),
        (-0.25, bottom - 0.22),
        (shaft_front, shaft_top + 0.1),
        (shaft_front + 0.02, shaft_top),
        (0.42, shaft_top - 0.02),
        (0.44, bottom - heel),
        (0.48, bottom),
        (0.3, bottom),
        (0.26, bottom - heel),
        (-0.48, bottom - heel * 0.5 + 0.02),
    ];
    c.fill(&body, &shade);
    if rng.chance(0.5) {
        // A side panel or zip.
        let d = shade.scaled(rng.range(0.5, 0.8));
        c.fill(&bar((0.2, shaft_top + 0.05), (0.2, bottom - heel - 0.05), 0.02), &d);
    }
}

fn bag(c: &mut Canvas, rng: &mut Rng) {
    let shade = Shade::random(rng, 0.25);
    let top = rng.range(-0.2, 0.0);
    let bottom = rng.range(0.38, 0.47);
    let top_hw = rng.range(0.28, 0.42);
    let bottom_hw = rng.range(0.33, 0.47);
    c.fill(&[(-top_hw, top), (top_hw, top), (bottom_hw, bottom), (-bottom_hw, bottom)], &shade);
    if rng.chance(0.75) {
        let hw = rng.range(0.1, 0.26);
        let peak = rng.range(-0.47, -0.28);
        c.fill(&arch(hw, top + 0.02, peak, rng.range(0.015, 0.035)), &shade.scaled(rng.range(0.7, 1.2)));
    } else {
        // A flap.
        let d = shade.scaled(rng.range(0.5, 0.8));
        let y = top + (bottom - top) * rng.range(0.3, 0.5);
        c.fill(&bar((-top_hw, y), (top_hw, y), 0.015), &d);
    }
}
