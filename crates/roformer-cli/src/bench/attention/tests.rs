//! Crossover detection and `--case` specs.

use roformer::measure::Masking;

use super::cases::{Case, Kind};
use super::measure::Measurement;
use super::report::{crossover, Record};

fn record(kind: Kind, len: usize, seconds: f64, bytes: u64) -> Record {
    Record {
        attention: kind.name(),
        masking: "causal",
        len,
        heads: 1,
        head_dim: 8,
        status: "ok",
        measurement: Some(Measurement {
            median_s: seconds,
            p10_s: seconds,
            p90_s: seconds,
            samples: 3,
            peak_bytes: bytes,
        }),
        reason: None,
    }
}

#[test]
fn crossover_is_where_linear_wins_for_good() {
    // Linear is faster at 256 (a fluke), slower at 512, faster from 1024 on; memory wins
    // everywhere.
    let mut records = Vec::new();
    for (len, s, l) in [
        (256, 2.0, 1.0),
        (512, 2.0, 3.0),
        (1024, 5.0, 4.0),
        (2048, 9.0, 5.0),
    ] {
        records.push(record(Kind::Softmax, len, s, 100 * len as u64));
        records.push(record(Kind::Linear, len, l, len as u64));
    }
    let c = crossover(Masking::Causal, &records);
    assert_eq!(c.time_len, Some(1024));
    assert_eq!(c.memory_len, Some(256));
    assert_eq!(c.shortest_common_len, Some(256));
    assert!(crossover(Masking::Bidirectional, &records)
        .time_len
        .is_none());
}

#[test]
fn case_specs_round_trip() {
    let case = Case {
        kind: Kind::Linear,
        masking: Masking::Causal,
        len: 4096,
    };
    let back = Case::parse(&case.spec()).unwrap();
    assert_eq!(
        (back.kind, back.masking, back.len),
        (case.kind, case.masking, case.len)
    );
    assert!(Case::parse("linear:causal").is_err());
    assert!(Case::parse("dense:causal:4").is_err());
}
