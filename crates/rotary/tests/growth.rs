//! The cached table of a `Rope`: it grows on demand without changing rows it already holds,
//! stops at `Rope::max_table_rows`, serves the same values as a fresh computation, and gives
//! identical results when one `Rope` is shared by threads that make it grow concurrently.

mod common;

use std::sync::{Arc, Barrier};

use common::Rng;
use rotary::{Coefficients, CosSin, Direction, Layout, Positions, Rope, Shape};

fn new_rope(layout: Layout) -> Rope {
    Rope::new(96, 64, 10_000.0, layout).unwrap()
}

/// Rows of a fresh table for positions `start..start + rows`, made directly.
fn fresh(rope: &Rope, start: usize, rows: usize) -> CosSin {
    CosSin::from_positions(rope.layout(), rope.inv_freq(), 1.0, rows, |r| {
        (start + r) as f64
    })
    .unwrap()
}

#[test]
fn table_grows_with_offsets_and_keeps_its_rows() {
    for layout in [Layout::Interleaved, Layout::Half] {
        let rope = new_rope(layout);
        let cap = rope.max_table_rows();
        assert_eq!(rope.table().rows(), 0, "no table before first use");
        let seq = 5;
        let mut before = rope.table();
        for offset in [
            0,
            10,
            251,
            252,
            1000,
            4090,
            70_000,
            cap - seq,
            cap - 2,
            cap + 3,
        ] {
            let c = rope
                .coefficients(Positions::Range { offset }, 1, seq)
                .unwrap();
            let table = rope.table();
            // Growth: enough rows for the call when they fit, never past the cap, never shrinking.
            assert!(table.rows() >= before.rows());
            assert!(table.rows() <= cap);
            // Served from the table exactly when the table at most doubles (or starts) to
            // cover the call; past the cap, or far beyond the table, rows are computed.
            let amortised = offset + seq <= before.rows().max(256) * 2;
            assert_eq!(
                matches!(c, Coefficients::Cached { .. }),
                offset + seq <= cap && amortised,
                "offset {offset}"
            );
            if matches!(c, Coefficients::Cached { .. }) {
                assert!(table.rows() >= offset + seq);
            } else {
                assert_eq!(table.rows(), before.rows(), "no growth for a far call");
            }
            // Same values as a fresh computation of those positions.
            let want = fresh(&rope, offset, seq);
            let got = c.view();
            assert_eq!(got.cos(), want.view().cos(), "offset {offset}");
            assert_eq!(got.sin(), want.view().sin(), "offset {offset}");
            // Rows held before growing are unchanged.
            for row in (0..before.rows()).step_by(97) {
                assert_eq!(before.row(row), table.row(row), "row {row} changed");
            }
            before = table;
        }
        // reserve: doubling growth, clamped to the cap.
        let r2 = new_rope(layout);
        assert!(r2.reserve(300).unwrap().rows() >= 300);
        assert_eq!(r2.reserve(cap + 1000).unwrap().rows(), cap);
    }
}

#[test]
fn decoding_token_by_token_grows_the_table_and_a_long_prompt_fills_it() {
    let rope = new_rope(Layout::Interleaved);
    for offset in 0..5000 {
        let c = rope
            .coefficients(Positions::Range { offset }, 1, 1)
            .unwrap();
        assert!(matches!(c, Coefficients::Cached { .. }), "offset {offset}");
    }
    // Doubling growth: a handful of rebuilds, not one per token.
    assert!(rope.table().rows() < 2 * 5000);
    // A prompt that fills at least a quarter of the new rows is served from the table.
    let prompt = new_rope(Layout::Interleaved);
    let c = prompt
        .coefficients(Positions::Range { offset: 3000 }, 1, 1000)
        .unwrap();
    assert!(matches!(c, Coefficients::Cached { .. }));
    assert!(prompt.table().rows() >= 4000);
}

#[test]
fn grown_table_rotates_like_a_fresh_rope() {
    let mut rng = Rng::new(21);
    let shape = Shape::head_major(2, 3, 7, 96);
    let x = rng.data(common::len(&shape));
    let used = new_rope(Layout::Half);
    for offset in [3, 300, 3000, 30_000, 300_000] {
        let mut a = x.clone();
        used.apply_inplace(
            &mut a,
            shape,
            Positions::Range { offset },
            Direction::Forward,
        )
        .unwrap();
        let mut b = x.clone();
        new_rope(Layout::Half)
            .apply_inplace(
                &mut b,
                shape,
                Positions::Range { offset },
                Direction::Forward,
            )
            .unwrap();
        assert_eq!(a, b, "offset {offset}");
    }
}

/// Eight threads share one `Rope`, each rotating with its own mix of ranges (increasing offsets
/// that force the table to grow while others read it), explicit and fractional positions; every
/// result must equal, bit for bit, the same call on a private `Rope` used by one thread.
#[test]
fn concurrent_use_gives_identical_results() {
    // `Rope` is shareable by reference across threads.
    fn assert_sync<T: Sync + Send>() {}
    assert_sync::<Rope>();

    let threads = 8;
    let shape = Shape::token_major(1, 9, 4, 96);
    let jobs: Vec<Vec<(Vec<f32>, Job)>> = (0..threads)
        .map(|t| {
            let mut rng = Rng::new(100 + t as u64);
            (0..12)
                .map(|i| {
                    let job = match i % 3 {
                        0 => Job::Range((i + 1) * 600 * (t + 1)),
                        1 => Job::Explicit((0..9).map(|_| rng.below(60_000) as u32).collect()),
                        _ => Job::Fractional((0..9).map(|_| rng.uniform(0.0, 5e4)).collect()),
                    };
                    (rng.data(common::len(&shape)), job)
                })
                .collect()
        })
        .collect();

    let shared = new_rope(Layout::Interleaved);
    let barrier = Arc::new(Barrier::new(threads));
    let results: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|list| {
                let (shared, barrier) = (&shared, Arc::clone(&barrier));
                s.spawn(move || {
                    barrier.wait();
                    list.iter()
                        .map(|(x, job)| job.run(shared, shape, x))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let private = new_rope(Layout::Interleaved);
    for (list, got) in jobs.iter().zip(&results) {
        for ((x, job), y) in list.iter().zip(got) {
            assert_eq!(&job.run(&private, shape, x), y, "{job:?}");
        }
    }
}

#[derive(Debug)]
enum Job {
    Range(usize),
    Explicit(Vec<u32>),
    Fractional(Vec<f64>),
}

impl Job {
    fn run(&self, rope: &Rope, shape: Shape, x: &[f32]) -> Vec<f32> {
        let positions = match self {
            Job::Range(offset) => Positions::Range { offset: *offset },
            Job::Explicit(p) => Positions::Explicit(p),
            Job::Fractional(p) => Positions::Fractional(p),
        };
        let mut y = x.to_vec();
        rope.apply_inplace(&mut y, shape, positions, Direction::Forward)
            .unwrap();
        y
    }
}
