//! Feeds arbitrary bytes, in arbitrary chunks, to RocketMQ's remoting frame decoder (both
//! header forms) and decodes what the broker would from every frame. The logic lives in
//! `remoting::fuzzing::check_decoder`, which unit tests also run on fixed inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    remoting::fuzzing::check_decoder(data);
});
