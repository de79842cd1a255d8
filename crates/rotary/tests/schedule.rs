//! The frequency schedule and the table rows against external golden values: the sinusoidal
//! example of seed 000 (`/work/shared/seeds/000_9ccf94ea278e1224.txt`), printed there by numpy
//! for d = 128, base 10000 (`angle_rates = 1 / 10000^(2 (i // 2) / d)`, sin on even and cos on
//! odd columns). The numbers below are transcribed from that printout, not computed by us.

use rotary::{CosSinView, Layout, Positions, Rope};

/// Rows for positions 1, 2, 3 of the seed's printout, first ten columns:
/// `[sin(m theta_0), cos(m theta_0), sin(m theta_1), cos(m theta_1), ...]`, 8 decimals.
const SINUSOIDAL: [[f64; 10]; 3] = [
    [
        0.84147098, 0.54030231, 0.76172041, 0.64790587, 0.68156135, 0.73176098, 0.60469402,
        0.79645787, 0.53316844, 0.84600911,
    ],
    [
        0.90929743,
        -0.41614684,
        0.98704625,
        -0.16043596,
        0.99748,
        0.07094825,
        0.96322662,
        0.26869029,
        0.90213071,
        0.43146283,
    ],
    [
        0.14112001,
        -0.9899925,
        0.51730572,
        -0.85580068,
        0.77827252,
        -0.62792665,
        0.92964484,
        -0.36845688,
        0.99325317,
        -0.11596614,
    ],
];

/// The seed's angles at position 1, i.e. `theta_i` for `i in 0..64`, 6 decimals.
const THETA: [f64; 64] = [
    1., 0.865964, 0.749894, 0.649382, 0.562341, 0.486968, 0.421697, 0.365174, 0.316228, 0.273842,
    0.237137, 0.205353, 0.177828, 0.153993, 0.133352, 0.115478, 0.1, 0.086596, 0.074989, 0.064938,
    0.056234, 0.048697, 0.04217, 0.036517, 0.031623, 0.027384, 0.023714, 0.020535, 0.017783,
    0.015399, 0.013335, 0.011548, 0.01, 0.00866, 0.007499, 0.006494, 0.005623, 0.00487, 0.004217,
    0.003652, 0.003162, 0.002738, 0.002371, 0.002054, 0.001778, 0.00154, 0.001334, 0.001155, 0.001,
    0.000866, 0.00075, 0.000649, 0.000562, 0.000487, 0.000422, 0.000365, 0.000316, 0.000274,
    0.000237, 0.000205, 0.000178, 0.000154, 0.000133, 0.000115,
];

/// The seed's ratio between successive frequencies, `10000^(-2/128)`, 6 decimals.
const RATIO: f64 = 0.865964;

/// Half a unit in the last printed decimal of an 8-decimal value, plus half an f32 ulp of a
/// value below 1 (the table's single rounding).
const TOL_8_DECIMALS: f64 = 5e-9 + 3.0e-8;

/// Half a unit in the 6th decimal (the f64 schedule itself is far more precise).
const TOL_6_DECIMALS: f64 = 5e-7 + 1e-12;

fn ropes() -> Vec<Rope> {
    [Layout::Interleaved, Layout::Half]
        .into_iter()
        .map(|layout| Rope::new(128, 128, 10_000.0, layout).unwrap())
        .collect()
}

/// `(c_i, s_i)` of pair `i` in row `row`, read back from the expanded form the table stores
/// (`C` duplicated on both coordinates of the pair, `S` = `-s` on the first, `s` on the second),
/// checking that expansion on the way.
fn pair_values(view: &CosSinView<'_>, row: usize, i: usize) -> (f64, f64) {
    let r = view.rotary_dim();
    let (a, b) = match view.layout() {
        Layout::Interleaved => (2 * i, 2 * i + 1),
        Layout::Half => (i, i + r / 2),
    };
    let (c, s) = (&view.cos()[row * r..], &view.sin()[row * r..]);
    assert_eq!(
        c[a].to_bits(),
        c[b].to_bits(),
        "row {row} pair {i}: C not duplicated"
    );
    assert_eq!(
        (-s[a]).to_bits(),
        s[b].to_bits(),
        "row {row} pair {i}: S not signed"
    );
    (f64::from(c[b]), f64::from(s[b]))
}

#[test]
fn table_rows_match_the_seed_sinusoids() {
    for rope in ropes() {
        let coefficients = rope.coefficients(Positions::START, 1, 4).unwrap();
        let view = coefficients.view();
        // Position 0: exactly cos 0 = 1 and sin 0 = 0 (the seed's first row, [0, 1, 0, 1, ...]).
        for i in 0..64 {
            assert_eq!(pair_values(&view, 0, i), (1.0, 0.0));
        }
        for (m, golden) in SINUSOIDAL.iter().enumerate() {
            let row = m + 1;
            for i in 0..5 {
                let (c, s) = pair_values(&view, row, i);
                let (want_s, want_c) = (golden[2 * i], golden[2 * i + 1]);
                assert!(
                    (s - want_s).abs() <= TOL_8_DECIMALS,
                    "{:?} position {row} pair {i}: sin {s} vs {want_s}",
                    rope.layout()
                );
                assert!(
                    (c - want_c).abs() <= TOL_8_DECIMALS,
                    "{:?} position {row} pair {i}: cos {c} vs {want_c}",
                    rope.layout()
                );
            }
        }
    }
}

#[test]
fn inverse_frequencies_match_the_seed() {
    let theta = rotary::inv_freqs(128, 10_000.0).unwrap();
    assert_eq!(theta.len(), 64);
    for (i, (&got, &want)) in theta.iter().zip(&THETA).enumerate() {
        assert!(
            (got - want).abs() <= TOL_6_DECIMALS,
            "theta_{i}: {got} vs {want}"
        );
    }
    for w in theta.windows(2) {
        let ratio = w[1] / w[0];
        assert!((ratio - RATIO).abs() <= TOL_6_DECIMALS, "ratio {ratio}");
    }
    for rope in ropes() {
        assert_eq!(rope.inv_freq(), &theta[..]);
    }
}

/// The angles the table encodes at position 1, recovered as `atan2(s_i, c_i)`, are the seed's
/// `theta_i`, and successive ones keep the seed's ratio. Tolerance: the printed 6 decimals plus
/// 2^-23 for the f32 rounding of `c_i` and `s_i` (each moves the angle by at most 2^-24).
#[test]
fn table_angles_at_position_one_follow_the_seed_ratio() {
    let tol = TOL_6_DECIMALS + (2f64).powi(-23);
    for rope in ropes() {
        let coefficients = rope
            .coefficients(Positions::Range { offset: 1 }, 1, 1)
            .unwrap();
        let view = coefficients.view();
        let angles: Vec<f64> = (0..64)
            .map(|i| {
                let (c, s) = pair_values(&view, 0, i);
                s.atan2(c)
            })
            .collect();
        for (i, (&got, &want)) in angles.iter().zip(&THETA).enumerate() {
            assert!((got - want).abs() <= tol, "angle {i}: {got} vs {want}");
        }
        // The ratio of the 17 largest angles (>= 0.1): 5e-7 printed plus twice the relative
        // angle error 2^-23 / 0.1 = 1.2e-6 of the f32 rounding, rounded up.
        for i in 0..16 {
            let ratio = angles[i + 1] / angles[i];
            assert!((ratio - RATIO).abs() <= 4e-6, "ratio at {i}: {ratio}");
        }
    }
}
