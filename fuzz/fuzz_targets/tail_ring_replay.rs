//! Lays a log into a tail ring, damages the ring, and follows the log through it as a
//! restart does: the walk must return only the log's own records (right offset, right CRC,
//! in order, within a lap) and every record before the first damaged byte. The logic lives
//! in `shard::fuzzing::check_tail_ring_walk`, which unit tests also run on fixed inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shard::fuzzing::check_tail_ring_walk(data);
});
