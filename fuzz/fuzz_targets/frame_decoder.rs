//! Feeds arbitrary bytes, split at arbitrary points, to the frame decoder and parses the
//! records of every decoded body. The logic lives in `protocol::fuzzing::check_decoder`, which
//! unit tests also run on fixed inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    protocol::fuzzing::check_decoder(data);
});
