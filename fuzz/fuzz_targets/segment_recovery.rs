//! Appends acknowledged records, damages the log (bit flips, overwrites, torn tails), and
//! checks recovery serves exactly the intact ones (never a damaged one, never losing one). The logic lives in
//! `shard::fuzzing::check_recovery_prefix`, which unit tests also run on fixed inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shard::fuzzing::check_recovery_prefix(data);
});
