//! The property a fuzz target for this crate checks, as a plain function so unit tests run it
//! too: any bytes, split into reads at any points, decode without a panic; a decoded frame is
//! never larger than the limit; the decoder never consumes more than it was given; and every
//! parser a server would run on a decoded frame (typed headers, JSON bodies, batch bodies,
//! stored records, properties) returns without a panic. A fuzz target is
//! `fuzz_target!(|data: &[u8]| remoting::fuzzing::check_decoder(data));`.

use bytes::BytesMut;

use crate::body::{self, HeartbeatData, LockBatchRequestBody, RegisterBrokerBody, TopicRouteData};
use crate::headers::*;
use crate::message;
use crate::{Decoded, Frame, RemotingDecoder};

pub fn check_decoder(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let limit = 4096u32;
    let mut decoder = RemotingDecoder::new(limit);
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
                    assert!(f.body.len() <= limit as usize, "a frame over the limit");
                    parse_everything(&f);
                }
                Ok(Some(Decoded::Oversized { frame_len, .. })) => {
                    assert!(frame_len + 4 > limit as u64);
                }
                Ok(None) => break,
                Err(_) => return,
            }
            taken += before - buf.len();
            assert!(taken <= fed, "the decoder consumed bytes it was not given");
        }
    }
}

fn parse_everything(f: &Frame) {
    let c = &f.command;
    let _ = c.ext_header::<SendMessageRequestHeader>();
    let _ = c.ext_header::<PullMessageRequestHeader>();
    let _ = c.ext_header::<QueryConsumerOffsetRequestHeader>();
    let _ = c.ext_header::<ConsumerSendMsgBackRequestHeader>();
    let _ = c.ext_header::<RegisterBrokerRequestHeader>();
    let _ = body::from_json::<HeartbeatData>(&f.body);
    let _ = body::from_json::<TopicRouteData>(&f.body);
    let _ = body::from_json::<LockBatchRequestBody>(&f.body);
    let _ = body::from_json::<RegisterBrokerBody>(&f.body);
    let _ = body::quote_numeric_keys(&f.body);
    let _ = message::decode_batch(&f.body);
    let _ = message::decode_stored(&f.body);
    if let Some(p) = c.ext("properties").or(c.ext("i")) {
        let _ = message::decode_properties(p);
    }
    if let Some(id) = c.ext("msgId") {
        let _ = message::decode_offset_msg_id(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode, RemotingCommand, SerializeType};

    #[test]
    fn the_property_holds_on_seeds_and_their_mutations() {
        let mut seeds: Vec<Vec<u8>> = Vec::new();
        for st in [SerializeType::Json, SerializeType::RocketMq] {
            let mut cmd = RemotingCommand::request(320, 1);
            cmd.serialize_type = st;
            cmd.ext_fields.insert("i".into(), "TAGS\u{1}A\u{2}".into());
            let batch = message::encode_batch(&[message::BatchMessage {
                flag: 0,
                body: bytes::Bytes::from_static(b"x"),
                properties: String::new(),
            }])
            .unwrap();
            seeds.push(encode(&cmd, &batch).unwrap().to_vec());
            seeds.push(
                encode(&cmd, br#"{"clientID":"c","brokerAddrs":{0:"a"}}"#)
                    .unwrap()
                    .to_vec(),
            );
        }
        let mut state = 0x853C_49E6_748F_EA9Bu64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for seed in &seeds {
            for split in [0u8, 1, 7, 63] {
                let mut input = vec![split];
                input.extend_from_slice(seed);
                check_decoder(&input);
                for _ in 0..300 {
                    let mut m = input.clone();
                    let i = 1 + (next() as usize % (m.len() - 1));
                    m[i] = next() as u8;
                    check_decoder(&m);
                    check_decoder(&m[..i]);
                }
            }
        }
        check_decoder(&[]);
        check_decoder(&[5]);
    }
}
