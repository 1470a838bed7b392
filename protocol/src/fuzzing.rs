//! The property the `frame_decoder` fuzz target checks, as a plain function so unit tests run
//! it too: any bytes, split into reads at any points, decode without a panic; a decoded frame
//! is never larger than the limit; the decoder never consumes more than it was given; and the
//! records in any decoded body are parsed without a panic either.

use bytes::BytesMut;

use crate::{Decoded, FrameDecoder};

pub fn check_decoder(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let limit = 4096u32;
    let mut decoder = FrameDecoder::new(limit);
    let mut buf = BytesMut::new();
    let step = (split as usize % 64) + 1;
    let mut fed = 0usize;
    let mut taken = 0usize;
    for piece in rest.chunks(step) {
        buf.extend_from_slice(piece);
        fed += piece.len();
        loop {
            let before = buf.len();
            match decoder.decode(&mut buf) {
                Ok(Some(Decoded::Frame(f))) => {
                    assert!(
                        f.body.len() <= limit as usize,
                        "a frame over the limit was decoded"
                    );
                    for v in message::records(&f.body).flatten() {
                        let _ = v.verify_crc();
                        let _ = v.tags();
                        let _ = v.keys().count();
                    }
                }
                Ok(Some(Decoded::Oversized { frame_len, .. })) => {
                    assert!(frame_len > limit as u64);
                }
                Ok(None) => break,
                Err(_) => return,
            }
            taken += before - buf.len();
            assert!(
                taken <= fed,
                "the decoder consumed bytes it was never given"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode_frame, Command, Header};

    #[test]
    fn fixed_inputs() {
        check_decoder(&[]);
        check_decoder(&[3, 0, 0, 0, 9, 0, 0, 0, 1, 7]);
        check_decoder(&[0xff; 300]);
        let mut good = vec![5u8];
        good.extend_from_slice(
            &encode_frame(&Header::request(1, Command::GetTopicList), b"body").unwrap(),
        );
        good.extend_from_slice(
            &encode_frame(&Header::request(2, Command::BrokerStatus), &[1u8; 5000]).unwrap(),
        );
        check_decoder(&good);
        for i in 1..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x5a;
            check_decoder(&bad);
        }
    }
}
