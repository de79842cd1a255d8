//! libFuzzer target `request`: [`roformer_fuzz::Target::Request`], with its structure-aware
//! (JSON) mutator for three mutations in four and libFuzzer's own for the rest.
#![no_main]

use libfuzzer_sys::{fuzz_mutator, fuzz_target, fuzzer_mutate};
use roformer_fuzz::Target;

fuzz_target!(|data: &[u8]| {
    let _ = Target::Request.run(data);
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    if seed % 4 == 0 {
        fuzzer_mutate(data, size, max_size)
    } else {
        Target::Request.mutate_in_place(data, size, max_size, u64::from(seed))
    }
});
