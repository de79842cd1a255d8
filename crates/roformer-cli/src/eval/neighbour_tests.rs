//! Tests of [`super`]: the neighbour baseline.

use super::*;

/// Ids: 0 `[PAD]`, 1 `[CLS]`, 2 `[SEP]`, 3 a, 4 b, 5 c; the candidates are a, b, c.
fn tiny(k: f64) -> NeighbourModel {
    let mut counts = Counts::default();
    for seq in [[1, 3, 4, 2], [1, 3, 5, 2], [1, 4, 5, 2]] {
        counts.add(&seq);
    }
    NeighbourModel::new(&counts, k, 6, vec![3, 4, 5])
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

/// The three sequences give c(CLS,a)=2, c(CLS,b)=1, c(a,b)=c(a,c)=c(b,SEP)=c(b,c)=1,
/// c(c,SEP)=2; c(CLS.)=3, c(a.)=c(b.)=c(c.)=2; c(CLS)=c(SEP)=3, c(a)=c(b)=c(c)=2, N=12.
/// With k=1, V=6 every score below is worked out by hand from the formula.
#[test]
fn scores_match_the_formula_worked_by_hand() {
    let m = tiny(1.0);
    let both = Context {
        left: Some(1),
        right: Some(2),
    };
    // P(x|CLS) = (c+1)/9, P(SEP|x) = (c+1)/8.
    assert!(close(m.score(both, 3), (3.0f64 / 9.0 * 1.0 / 8.0).ln()));
    assert!(close(m.score(both, 4), (2.0f64 / 9.0 * 2.0 / 8.0).ln()));
    assert!(close(m.score(both, 5), (1.0f64 / 9.0 * 3.0 / 8.0).ln()));
    assert_eq!(m.rank(both, 4), Some(0));

    // Left masked: P(x) = (c(x)+1)/18 in place of P(x|l).
    let no_left = Context {
        left: None,
        right: Some(2),
    };
    assert!(close(m.score(no_left, 3), (3.0f64 / 18.0 * 1.0 / 8.0).ln()));
    assert!(close(m.score(no_left, 4), (3.0f64 / 18.0 * 2.0 / 8.0).ln()));
    assert!(close(m.score(no_left, 5), (3.0f64 / 18.0 * 3.0 / 8.0).ln()));
    assert_eq!(
        [3, 4, 5].map(|x| m.rank(no_left, x)),
        [Some(2), Some(1), Some(0)]
    );

    // Right masked: P(r|x) dropped; the left conditional alone.
    let no_right = Context {
        left: Some(1),
        right: None,
    };
    assert!(close(m.score(no_right, 3), (3.0f64 / 9.0).ln()));
    assert!(close(m.score(no_right, 5), (1.0f64 / 9.0).ln()));
    assert_eq!(
        [3, 4, 5].map(|x| m.rank(no_right, x)),
        [Some(0), Some(1), Some(2)]
    );

    // Both masked: the unigram, all three tied at 3/18: ties go to the lower id.
    let none = Context {
        left: None,
        right: None,
    };
    assert!(close(m.score(none, 4), (3.0f64 / 18.0).ln()));
    assert_eq!(
        [3, 4, 5].map(|x| m.rank(none, x)),
        [Some(0), Some(1), Some(2)]
    );
}

#[test]
fn only_candidates_are_ranked() {
    let m = tiny(1.0);
    // After b: SEP and c (2/8 each) beat a (1/8), but SEP is not a candidate.
    let after_b = Context {
        left: Some(4),
        right: None,
    };
    assert!(m.score(after_b, 2) > m.score(after_b, 3));
    assert_eq!(m.rank(after_b, 5), Some(0));
    assert_eq!(m.rank(after_b, 3), Some(1));
    assert_eq!(m.rank(after_b, 2), None, "SEP is no candidate");
}

#[test]
fn smoothing_k_changes_the_scores() {
    let (a, b) = (tiny(1.0), tiny(0.1));
    let both = Context {
        left: Some(1),
        right: Some(2),
    };
    // k = 0.1: P(a|CLS) = 2.1/3.6, P(SEP|a) = 0.1/2.6.
    assert!(close(b.score(both, 3), (2.1f64 / 3.6 * 0.1 / 2.6).ln()));
    assert!(!close(a.score(both, 3), b.score(both, 3)));
}

/// The dense scores equal the reference bit for bit, and the rank counts the candidates
/// that beat the target, on a pseudo-random corpus over awkward contexts.
#[test]
fn dense_scores_and_ranks_match_the_reference() {
    let mut counts = Counts::default();
    let mut state = 12345u64;
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for _ in 0..200 {
        let len = 1 + next(12) as usize;
        let mut seq = vec![1u32];
        seq.extend((0..len).map(|_| 3 + next(17) as u32));
        seq.push(2);
        counts.add(&seq);
    }
    let candidates: Vec<u32> = (3..18).collect();
    let m = NeighbourModel::new(&counts, 0.1, 22, candidates.clone());
    let sides = [None, Some(1), Some(2), Some(3), Some(7), Some(19), Some(21)];
    for left in sides {
        for right in sides {
            let context = Context { left, right };
            let dense = m.scores(context);
            for x in 0..22u32 {
                assert_eq!(dense[x as usize].to_bits(), m.score(context, x).to_bits());
            }
            for &target in &candidates {
                let own = m.score(context, target);
                let higher = candidates
                    .iter()
                    .filter(|&&x| {
                        let s = m.score(context, x);
                        s > own || (s == own && x < target)
                    })
                    .count();
                assert_eq!(m.rank(context, target), (higher < 5).then_some(higher));
            }
        }
    }
}

#[test]
fn the_unigram_ranking_is_by_count_then_id() {
    let mut counts = Counts::default();
    counts.add(&[1, 5, 4, 5, 3, 4, 2]);
    assert_eq!(counts.ranking(&[3, 4, 5, 6]), vec![4, 5, 3]);
}
