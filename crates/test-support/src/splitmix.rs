//! SplitMix64 (Steele, Lea and Flood, 2014), the seeded generator of the workspace's tests:
//! the same seed draws the same cases on every machine, with no dependency on `rand`'s API.

/// The golden-ratio increment `floor(2^64 / phi)`, added to the state at every draw.
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: `z ^= z >> 30; z *= c1; z ^= z >> 27; z *= c2; z ^ (z >> 31)`,
/// a bijection of `u64` that spreads every input bit over the output.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A SplitMix64 stream: `state += GAMMA`, then [`mix`]`(state)` is the next draw.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The stream whose first draw is `mix(state + GAMMA)`.
    pub fn new(state: u64) -> SplitMix64 {
        SplitMix64 { state }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// Uniform in `[0, 1)` with 53 bits: `(z >> 11) / 2^53`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, 1)` with 24 bits, exact in `f32`: `(z >> 40) / 2^24`.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[-1, 1)` with 24 bits: `2 unit_f32 - 1`.
    pub fn signed_f32(&mut self) -> f32 {
        self.unit_f32() * 2.0 - 1.0
    }

    /// Uniform in `[lo, hi)`: `lo + (hi - lo) * unit`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// An integer in `[0, n)` by `z mod n` (its bias, below `n / 2^64`, does not matter to a
    /// test); `n = 0` is taken as 1.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_reference_stream() {
        // The first outputs for seed 1234567 of the authors' reference (Vigna's splitmix64.c).
        let mut rng = SplitMix64::new(1_234_567);
        let drawn: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            drawn,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423
            ]
        );
    }

    #[test]
    fn draws_stay_in_their_ranges() {
        let mut rng = SplitMix64::new(7);
        for _ in 0..10_000 {
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
            let f = rng.unit_f32();
            assert!((0.0..1.0).contains(&f));
            assert!((-1.0..1.0).contains(&rng.signed_f32()));
            assert!((-3.0..5.0).contains(&rng.uniform(-3.0, 5.0)));
            assert!(rng.below(13) < 13);
            assert_eq!(rng.below(0), 0);
        }
    }
}
