//! Frames: header forms, encoding, and the incremental decoder.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::Serialize;

use crate::command::{ExtFields, LanguageCode, RemotingCommand, SerializeType};
use crate::{RemotingError, Result};

/// The length word and the serialize-type/header-length word.
pub const FRAME_PREFIX_BYTES: usize = 8;
/// The Java server's `com.rocketmq.remoting.frameMaxLength` default: 16 MiB, counting the
/// length prefix (Netty's `LengthFieldBasedFrameDecoder` counts it).
pub const FRAME_BYTES_MAX_DEFAULT: u32 = 16 * 1024 * 1024;
/// Limit on a header. Real headers are a few hundred bytes (message properties, the largest
/// field, are capped at 32 KiB by clients); a larger one is a bug or an attack.
pub const HEADER_BYTES_MAX: u32 = 1024 * 1024;
/// The header length is the low 24 bits of the second word.
const HEADER_LEN_MASK: u32 = 0x00FF_FFFF;
/// Fixed part of a binary header: code, language, version, opaque, flag, remark length.
const BINARY_FIXED_BYTES: usize = 2 + 1 + 2 + 4 + 4 + 4;

/// One decoded frame: its command and its body, split off the read buffer without a copy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    pub command: RemotingCommand,
    pub body: Bytes,
}

impl Frame {
    pub fn new(command: RemotingCommand, body: impl Into<Bytes>) -> Self {
        Frame {
            command,
            body: body.into(),
        }
    }

    pub fn encode(&self) -> Result<Bytes> {
        encode(&self.command, &self.body)
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonHeaderOut<'a> {
    code: i32,
    language: &'static str,
    version: i32,
    opaque: i32,
    flag: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    remark: Option<&'a str>,
    ext_fields: &'a ExtFields,
    #[serde(rename = "serializeTypeCurrentRPC")]
    serialize_type_current_rpc: &'static str,
}

/// The header bytes of `cmd` in its own serialize type.
pub fn encode_header(cmd: &RemotingCommand) -> Result<Vec<u8>> {
    match cmd.serialize_type {
        SerializeType::Json => {
            let out = JsonHeaderOut {
                code: cmd.code,
                language: cmd.language.name(),
                version: cmd.version,
                opaque: cmd.opaque,
                flag: cmd.flag,
                remark: cmd.remark.as_deref(),
                ext_fields: &cmd.ext_fields,
                serialize_type_current_rpc: SerializeType::Json.name(),
            };
            Ok(serde_json::to_vec(&out)?)
        }
        SerializeType::RocketMq => encode_binary_header(cmd),
    }
}

fn to_i16(what: &'static str, v: i32) -> Result<i16> {
    i16::try_from(v).map_err(|_| RemotingError::OutOfRange {
        what,
        value: v as i64,
    })
}

fn len_i32(what: &'static str, len: usize) -> Result<i32> {
    i32::try_from(len).map_err(|_| RemotingError::OutOfRange {
        what,
        value: len as i64,
    })
}

fn encode_binary_header(cmd: &RemotingCommand) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(binary_header_bytes(cmd));
    write_binary_header(cmd, &mut out)?;
    Ok(out)
}

/// The bytes of `cmd`'s binary header.
fn binary_header_bytes(cmd: &RemotingCommand) -> usize {
    let remark_bytes = cmd.remark.as_deref().map_or(0, str::len);
    let fields_bytes: usize = cmd
        .ext_fields
        .iter()
        .map(|(k, v)| 6 + k.len() + v.len())
        .sum();
    BINARY_FIXED_BYTES + 4 + remark_bytes + fields_bytes
}

/// Appends `cmd`'s binary (ROCKETMQ) header to `out`. On an error `out` may hold part of it.
fn write_binary_header<B>(cmd: &RemotingCommand, out: &mut B) -> Result<()>
where
    B: BufMut + std::ops::DerefMut<Target = [u8]>,
{
    let code = to_i16("binary header code", cmd.code)?;
    let version = to_i16("binary header version", cmd.version)?;
    out.put_i16(code);
    out.put_u8(cmd.language.code());
    out.put_i16(version);
    out.put_i32(cmd.opaque);
    out.put_i32(cmd.flag);
    // Java writes an empty remark as null (length 0), so "" and None are one thing on the wire.
    let remark = cmd.remark.as_deref().unwrap_or("");
    out.put_i32(len_i32("remark", remark.len())?);
    out.put_slice(remark.as_bytes());
    // The fields are written in place behind their section's length, filled in after.
    let len_at = out.len();
    out.put_i32(0);
    for (k, v) in &cmd.ext_fields {
        let key_len = i16::try_from(k.len()).map_err(|_| RemotingError::OutOfRange {
            what: "extFields key length",
            value: k.len() as i64,
        })?;
        out.put_i16(key_len);
        out.put_slice(k.as_bytes());
        out.put_i32(len_i32("extFields value length", v.len())?);
        out.put_slice(v.as_bytes());
    }
    let ext_len = len_i32("extFields length", out.len() - len_at - 4)?;
    out[len_at..len_at + 4].copy_from_slice(&ext_len.to_be_bytes());
    Ok(())
}

/// Writes the length words and the header of a frame whose `body_len`-byte body the caller
/// appends next (so a large body need not be copied into the frame buffer). A binary header
/// is written in place; on an error `out` is left as it was.
pub fn encode_prefix(cmd: &RemotingCommand, body_len: usize, out: &mut BytesMut) -> Result<()> {
    let start = out.len();
    let header_len = match cmd.serialize_type {
        SerializeType::RocketMq => {
            out.reserve(FRAME_PREFIX_BYTES + binary_header_bytes(cmd));
            out.put_u64(0);
            if let Err(e) = write_binary_header(cmd, out) {
                out.truncate(start);
                return Err(e);
            }
            out.len() - start - FRAME_PREFIX_BYTES
        }
        SerializeType::Json => {
            let header = encode_header(cmd)?;
            out.reserve(FRAME_PREFIX_BYTES + header.len());
            out.put_u64(0);
            out.extend_from_slice(&header);
            header.len()
        }
    };
    let frame_len = 4u64 + header_len as u64 + body_len as u64;
    if header_len > HEADER_LEN_MASK as usize {
        out.truncate(start);
        return Err(RemotingError::OutOfRange {
            what: "header length",
            value: header_len as i64,
        });
    }
    if frame_len > i32::MAX as u64 {
        out.truncate(start);
        return Err(RemotingError::FrameTooLarge {
            len: frame_len,
            max: i32::MAX as u32,
        });
    }
    let words =
        (frame_len << 32) | u64::from((cmd.serialize_type.code() as u32) << 24 | header_len as u32);
    out[start..start + FRAME_PREFIX_BYTES].copy_from_slice(&words.to_be_bytes());
    Ok(())
}

/// Appends the whole frame of `cmd` with `body` to `out`.
pub fn encode_into(cmd: &RemotingCommand, body: &[u8], out: &mut BytesMut) -> Result<()> {
    encode_prefix(cmd, body.len(), out)?;
    out.extend_from_slice(body);
    Ok(())
}

/// The whole frame of `cmd` with `body`.
pub fn encode(cmd: &RemotingCommand, body: &[u8]) -> Result<Bytes> {
    let mut out = BytesMut::with_capacity(FRAME_PREFIX_BYTES + 256 + body.len());
    encode_into(cmd, body, &mut out)?;
    Ok(out.freeze())
}

// ---------------------------------------------------------------------------------------------
// Header decoding

/// Decodes a header of the given serialize type.
pub fn decode_header(serialize_type: SerializeType, bytes: &[u8]) -> Result<RemotingCommand> {
    match serialize_type {
        SerializeType::Json => decode_json_header(bytes),
        SerializeType::RocketMq => decode_binary_header(bytes),
    }
}

fn decode_json_header(bytes: &[u8]) -> Result<RemotingCommand> {
    crate::json_header::decode(bytes)
}

/// A bounds-checked big-endian reader over a byte slice.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(RemotingError::Truncated {
                what: self.what,
                need: n,
                have: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// A length read from the wire, refused when negative.
    pub(crate) fn len_i32(&mut self, what: &'static str) -> Result<usize> {
        let len = self.i32()?;
        usize::try_from(len).map_err(|_| RemotingError::BadLength {
            what,
            len: len as i64,
        })
    }

    pub(crate) fn len_i16(&mut self, what: &'static str) -> Result<usize> {
        let len = self.i16()?;
        usize::try_from(len).map_err(|_| RemotingError::BadLength {
            what,
            len: len as i64,
        })
    }

    pub(crate) fn string(&mut self, len: usize, what: &'static str) -> Result<String> {
        self.str(len, what).map(str::to_owned)
    }

    /// The next `len` bytes as text, borrowed.
    pub(crate) fn str(&mut self, len: usize, what: &'static str) -> Result<&'a str> {
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| RemotingError::InvalidUtf8 { what })
    }
}

fn decode_binary_header(bytes: &[u8]) -> Result<RemotingCommand> {
    let mut r = Reader::new(bytes, "binary header");
    if r.remaining() < BINARY_FIXED_BYTES {
        return Err(RemotingError::Truncated {
            what: "binary header",
            need: BINARY_FIXED_BYTES,
            have: r.remaining(),
        });
    }
    let code = r.i16()? as i32;
    let language = LanguageCode::from_code(r.u8()?);
    let version = r.i16()? as i32;
    let opaque = r.i32()?;
    let flag = r.i32()?;
    let remark_len = r.len_i32("remark")?;
    let remark = if remark_len == 0 {
        None
    } else {
        Some(r.string(remark_len, "remark")?)
    };
    let ext_len = r.len_i32("extFields")?;
    let mut ext = Reader::new(r.take(ext_len)?, "extFields");
    if r.remaining() != 0 {
        return Err(RemotingError::TrailingBytes {
            what: "binary header",
            len: r.remaining(),
        });
    }
    // Room for every key and value (the section less its length words), and a guess at the
    // count: RocketMQ's send headers have about 14 fields of a few bytes each.
    let mut ext_fields = ExtFields::with_capacity(ext_len, ext_len / 12 + 1);
    while ext.remaining() > 0 {
        let key_len = ext.len_i16("extFields key")?;
        let key = ext.str(key_len, "extFields key")?;
        let val_len = ext.len_i32("extFields value")?;
        let val = ext.str(val_len, "extFields value")?;
        ext_fields.add_unsorted(key, val);
    }
    ext_fields.sort_added();
    Ok(RemotingCommand {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        serialize_type: SerializeType::RocketMq,
    })
}

// ---------------------------------------------------------------------------------------------
// Frame decoding

/// The two prefix words of a frame, validated: the frame's length (excluding the length word),
/// its serialize type and its header length.
struct Prefix {
    frame_len: u32,
    serialize_type: SerializeType,
    header_len: u32,
}

fn read_prefix(buf: &[u8]) -> Result<Prefix> {
    let mut r = Reader::new(buf, "frame prefix");
    let frame_len = r.i32()?;
    let word = r.i32()? as u32;
    if frame_len < 4 {
        return Err(RemotingError::BadFrameLength {
            frame_len: frame_len as i64,
        });
    }
    let frame_len = frame_len as u32;
    let type_code = (word >> 24) as u8;
    let header_len = word & HEADER_LEN_MASK;
    let serialize_type = SerializeType::from_code(type_code)
        .ok_or(RemotingError::UnknownSerializeType(type_code))?;
    if header_len > HEADER_BYTES_MAX || header_len > frame_len - 4 {
        return Err(RemotingError::BadHeaderLength {
            header_len,
            frame_len,
        });
    }
    Ok(Prefix {
        frame_len,
        serialize_type,
        header_len,
    })
}

/// Decodes exactly one whole frame, length word included.
pub fn decode_frame(mut frame: Bytes) -> Result<Frame> {
    let prefix = read_prefix(&frame)?;
    let total = 4 + prefix.frame_len as usize;
    if frame.len() != total {
        return Err(RemotingError::Truncated {
            what: "frame",
            need: total,
            have: frame.len(),
        });
    }
    let header_end = FRAME_PREFIX_BYTES + prefix.header_len as usize;
    let command = decode_header(
        prefix.serialize_type,
        &frame[FRAME_PREFIX_BYTES..header_end],
    )?;
    frame.advance(header_end);
    Ok(Frame {
        command,
        body: frame,
    })
}

/// What [`RemotingDecoder::decode`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    Frame(Frame),
    /// A frame over the limit. Its header, when it could be read, lets the server answer
    /// (Java closes the connection instead); the decoder throws the rest of the frame away as
    /// it arrives, so the stream stays usable.
    Oversized {
        command: Option<RemotingCommand>,
        frame_len: u64,
    },
}

/// Incremental frame decoder. Feed it the connection's read buffer after every read; it
/// splits off whole frames and leaves partial ones in place.
#[derive(Debug, Clone)]
pub struct RemotingDecoder {
    frame_bytes_max: u32,
    /// Bytes of an oversized frame still to be thrown away.
    discard_remaining: u64,
}

impl Default for RemotingDecoder {
    fn default() -> Self {
        RemotingDecoder::new(FRAME_BYTES_MAX_DEFAULT)
    }
}

impl RemotingDecoder {
    /// `frame_bytes_max` counts the whole frame, length word included, like Java's.
    pub fn new(frame_bytes_max: u32) -> Self {
        RemotingDecoder {
            frame_bytes_max,
            discard_remaining: 0,
        }
    }

    pub fn frame_bytes_max(&self) -> u32 {
        self.frame_bytes_max
    }

    /// True while the rest of an oversized frame is still to be thrown away.
    pub fn is_discarding(&self) -> bool {
        self.discard_remaining > 0
    }

    /// `Ok(None)`: more bytes are needed. `Err`: the stream cannot be trusted any more (frame
    /// boundaries are lost, or a frame's header is garbage); answer if you can, then close.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>> {
        if self.discard_remaining > 0 {
            let n = self.discard_remaining.min(buf.len() as u64) as usize;
            buf.advance(n);
            self.discard_remaining -= n as u64;
            if self.discard_remaining > 0 {
                return Ok(None);
            }
        }
        if buf.len() < FRAME_PREFIX_BYTES {
            return Ok(None);
        }
        let prefix = read_prefix(buf)?;
        let total = 4 + prefix.frame_len as u64;
        let header_end = FRAME_PREFIX_BYTES + prefix.header_len as usize;
        if total > self.frame_bytes_max as u64 {
            if buf.len() < header_end {
                return Ok(None);
            }
            let command =
                decode_header(prefix.serialize_type, &buf[FRAME_PREFIX_BYTES..header_end]).ok();
            let take = total.min(buf.len() as u64) as usize;
            buf.advance(take);
            self.discard_remaining = total - take as u64;
            return Ok(Some(Decoded::Oversized {
                command,
                frame_len: prefix.frame_len as u64,
            }));
        }
        let total = total as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let frame = buf.split_to(total).freeze();
        decode_frame(frame).map(|f| Some(Decoded::Frame(f)))
    }

    /// Decodes every whole frame in `buf`, stopping at the first oversized one or error.
    pub fn decode_all(&mut self, buf: &mut BytesMut) -> Result<Vec<Decoded>> {
        let mut out = Vec::new();
        while let Some(d) = self.decode(buf)? {
            out.push(d);
        }
        Ok(out)
    }

    /// The whole length (prefix included) of the incomplete, within-limit frame whose start
    /// `buf` holds, once its prefix is known; `None` otherwise.
    pub fn partial_frame_len(&self, buf: &[u8]) -> Option<usize> {
        if self.discard_remaining > 0 {
            return None;
        }
        let prefix = read_prefix(buf).ok()?;
        let total = 4 + prefix.frame_len as u64;
        (total <= self.frame_bytes_max as u64 && (buf.len() as u64) < total)
            .then_some(total as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(serialize_type: SerializeType) -> RemotingCommand {
        let mut cmd = RemotingCommand::request(310, 42);
        cmd.language = LanguageCode::Go;
        cmd.version = 401;
        cmd.flag = 2;
        cmd.remark = Some("héllo".into());
        cmd.serialize_type = serialize_type;
        cmd.ext_fields.insert("a".into(), "group".into());
        cmd.ext_fields.insert("b".into(), "TopicTest".into());
        cmd.ext_fields
            .insert("i".into(), "TAGS\u{1}TagA\u{2}".into());
        cmd.ext_fields.insert("empty".into(), String::new());
        cmd
    }

    #[test]
    fn a_prefix_written_in_place_decodes_and_a_refused_one_leaves_the_buffer_as_it_was() {
        for serialize_type in [SerializeType::RocketMq, SerializeType::Json] {
            let cmd = sample(serialize_type);
            let mut out = BytesMut::from(&b"before"[..]);
            encode_prefix(&cmd, 3, &mut out).unwrap();
            out.extend_from_slice(b"xyz");
            let mut wire = out.split_off(6);
            assert_eq!(&out[..], b"before");
            assert_eq!(wire, encode(&cmd, b"xyz").unwrap());
            match RemotingDecoder::default().decode(&mut wire).unwrap() {
                Some(Decoded::Frame(f)) => {
                    assert_eq!(f.command, cmd);
                    assert_eq!(&f.body[..], b"xyz");
                }
                other => panic!("{other:?}"),
            }
            let mut bad = cmd.clone();
            bad.code = i32::from(i16::MAX) + 1;
            let mut out = BytesMut::from(&b"before"[..]);
            if serialize_type == SerializeType::RocketMq {
                assert!(encode_prefix(&bad, 3, &mut out).is_err());
                assert_eq!(&out[..], b"before");
            }
        }
    }

    #[test]
    fn json_frame_bytes_follow_the_layout() {
        // i32 length 29 = 4 + 23 + 2; i32 word = type 0 << 24 | 23; header; body "hi".
        let mut wire = vec![0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x17];
        wire.extend_from_slice(br#"{"code":105,"opaque":7}"#);
        wire.extend_from_slice(b"hi");
        let f = decode_frame(Bytes::from(wire)).unwrap();
        assert_eq!(f.command.code, 105);
        assert_eq!(f.command.opaque, 7);
        assert_eq!(f.command.language, LanguageCode::Java);
        assert_eq!(f.command.remark, None);
        assert!(f.command.ext_fields.is_empty());
        assert_eq!(f.command.serialize_type, SerializeType::Json);
        assert_eq!(&f.body[..], b"hi");
    }

    #[test]
    fn json_header_encoding_is_exact() {
        let mut cmd = RemotingCommand::request(105, 7);
        cmd.version = 401;
        cmd.ext_fields.insert("topic".into(), "T".into());
        let wire = encode(&cmd, b"").unwrap();
        let header = br#"{"code":105,"language":"JAVA","version":401,"opaque":7,"flag":0,"extFields":{"topic":"T"},"serializeTypeCurrentRPC":"JSON"}"#;
        let mut expected = Vec::new();
        expected.extend_from_slice(&(4 + header.len() as u32).to_be_bytes());
        expected.extend_from_slice(&(header.len() as u32).to_be_bytes());
        expected.extend_from_slice(header);
        assert_eq!(&wire[..], &expected[..]);
    }

    #[test]
    fn binary_frame_bytes_follow_the_layout() {
        let wire: Vec<u8> = vec![
            0x00, 0x00, 0x00, 0x25, // length 37 = 4 + 33
            0x01, 0x00, 0x00, 0x21, // ROCKETMQ << 24 | header length 33
            0x00, 0x69, // code 105
            0x01, // language CPP
            0x01, 0x91, // version 401
            0x00, 0x00, 0x00, 0x07, // opaque
            0x00, 0x00, 0x00, 0x00, // flag
            0x00, 0x00, 0x00, 0x00, // remark: null
            0x00, 0x00, 0x00, 0x0C, // extFields: 12 bytes
            0x00, 0x05, b't', b'o', b'p', b'i', b'c', // key
            0x00, 0x00, 0x00, 0x01, b'T', // value
        ];
        let f = decode_frame(Bytes::from(wire.clone())).unwrap();
        let cmd = &f.command;
        assert_eq!(cmd.code, 105);
        assert_eq!(cmd.language, LanguageCode::Cpp);
        assert_eq!(cmd.version, 401);
        assert_eq!(cmd.opaque, 7);
        assert_eq!(cmd.flag, 0);
        assert_eq!(cmd.remark, None);
        assert_eq!(cmd.ext("topic"), Some("T"));
        assert_eq!(cmd.serialize_type, SerializeType::RocketMq);
        assert!(f.body.is_empty());
        // And the encoder writes exactly these bytes back.
        assert_eq!(&encode(cmd, b"").unwrap()[..], &wire[..]);
    }

    #[test]
    fn both_forms_round_trip() {
        for st in [SerializeType::Json, SerializeType::RocketMq] {
            let cmd = sample(st);
            let wire = encode(&cmd, b"body bytes").unwrap();
            let f = decode_frame(wire).unwrap();
            assert_eq!(f.command, cmd, "{st:?}");
            assert_eq!(&f.body[..], b"body bytes");
            let resp = RemotingCommand::response_to(&f.command, 0, None);
            let back = decode_frame(encode(&resp, b"").unwrap()).unwrap();
            assert_eq!(back.command, resp);
            assert!(back.command.is_response());
            assert_eq!(back.command.serialize_type, st);
        }
    }

    #[test]
    fn binary_empty_remark_is_null_on_the_wire() {
        let mut cmd = sample(SerializeType::RocketMq);
        cmd.remark = Some(String::new());
        let f = decode_frame(encode(&cmd, b"").unwrap()).unwrap();
        assert_eq!(f.command.remark, None);
    }

    #[test]
    fn binary_refuses_codes_that_do_not_fit_i16() {
        let mut cmd = RemotingCommand::request(200_050, 1);
        cmd.serialize_type = SerializeType::RocketMq;
        assert!(matches!(
            encode(&cmd, b""),
            Err(RemotingError::OutOfRange { .. })
        ));
        cmd.serialize_type = SerializeType::Json;
        assert_eq!(
            decode_frame(encode(&cmd, b"").unwrap())
                .unwrap()
                .command
                .code,
            200_050
        );
    }

    #[test]
    fn json_header_tolerates_what_real_clients_send() {
        // C++ 0.4.4: numbers and booleans in extFields, no serializeTypeCurrentRPC, a trailing
        // newline, an empty remark. Unknown fields are ignored; numbers may be strings.
        let header = b"{\"code\":\"10\",\"extFields\":{\"queueId\":0,\"batch\":false,\"x\":null,\
            \"flag\":1.5,\"topic\":\"T\"},\"flag\":0,\"language\":\"CPP\",\"opaque\":3,\
            \"remark\":\"\",\"version\":63,\"whatever\":[1,2]}\n";
        let cmd = decode_header(SerializeType::Json, header).unwrap();
        assert_eq!(cmd.code, 10);
        assert_eq!(cmd.language, LanguageCode::Cpp);
        assert_eq!(cmd.version, 63);
        assert_eq!(cmd.remark.as_deref(), Some(""));
        assert_eq!(cmd.ext("queueId"), Some("0"));
        assert_eq!(cmd.ext("batch"), Some("false"));
        assert_eq!(cmd.ext("flag"), Some("1.5"));
        assert_eq!(cmd.ext("x"), None);
        assert_eq!(cmd.ext("topic"), Some("T"));
        // A numeric language, a null remark, missing fields.
        let cmd = decode_header(
            SerializeType::Json,
            br#"{"code":34,"language":9,"remark":null}"#,
        )
        .unwrap();
        assert_eq!(cmd.language, LanguageCode::Go);
        assert_eq!(cmd.opaque, 0);
        assert_eq!(cmd.remark, None);
    }

    #[test]
    fn json_header_garbage_is_an_error() {
        for bad in [
            &b""[..],
            b"[]",
            b"{",
            b"{\"code\":true}",
            b"{\"code\":99999999999}",
            b"{\"opaque\":\"x\"}",
            b"{\"extFields\":[1]}",
            b"{\"language\":-1}",
            b"\xff\xfe",
        ] {
            assert!(decode_header(SerializeType::Json, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn binary_header_garbage_is_an_error() {
        let good = encode_header(&sample(SerializeType::RocketMq)).unwrap();
        // Every strict prefix is truncated.
        for n in 0..good.len() {
            assert!(
                decode_header(SerializeType::RocketMq, &good[..n]).is_err(),
                "{n}"
            );
        }
        // Trailing bytes, negative lengths, a remark longer than the header, bad UTF-8.
        let mut long = good.clone();
        long.push(0);
        assert!(decode_header(SerializeType::RocketMq, &long).is_err());
        let mut neg = good.clone();
        neg[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            decode_header(SerializeType::RocketMq, &neg),
            Err(RemotingError::BadLength { .. })
        ));
        let mut huge = good.clone();
        huge[13..17].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode_header(SerializeType::RocketMq, &huge),
            Err(RemotingError::Truncated { .. })
        ));
        let mut utf = good.clone();
        utf[17] = 0xFF;
        assert!(matches!(
            decode_header(SerializeType::RocketMq, &utf),
            Err(RemotingError::InvalidUtf8 { .. })
        ));
    }

    #[test]
    fn decoder_handles_any_split() {
        let mut wire = BytesMut::new();
        encode_into(&sample(SerializeType::Json), b"one", &mut wire).unwrap();
        encode_into(&sample(SerializeType::RocketMq), b"two", &mut wire).unwrap();
        encode_into(&RemotingCommand::request(34, 9), b"", &mut wire).unwrap();
        let mut dec = RemotingDecoder::default();
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(d) = dec.decode(&mut buf).unwrap() {
                match d {
                    Decoded::Frame(f) => frames.push(f),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        assert_eq!(frames.len(), 3);
        assert_eq!(&frames[0].body[..], b"one");
        assert_eq!(frames[1].command.serialize_type, SerializeType::RocketMq);
        assert_eq!(&frames[1].body[..], b"two");
        assert_eq!(frames[2].command.code, 34);
        assert!(buf.is_empty());
    }

    #[test]
    fn partial_frame_is_reported() {
        let wire = encode(&sample(SerializeType::Json), &[7u8; 1000]).unwrap();
        let mut dec = RemotingDecoder::default();
        let mut buf = BytesMut::from(&wire[..100]);
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
        assert_eq!(buf.len(), 100, "a partial frame stays in the buffer");
        assert_eq!(dec.partial_frame_len(&buf), Some(wire.len()));
        assert_eq!(dec.partial_frame_len(&wire), None);
        assert_eq!(dec.partial_frame_len(&[0, 0]), None);
        buf.extend_from_slice(&wire[100..]);
        assert!(matches!(
            dec.decode(&mut buf).unwrap(),
            Some(Decoded::Frame(_))
        ));
    }

    #[test]
    fn oversized_frame_is_reported_and_skipped() {
        let mut wire = BytesMut::new();
        encode_into(&sample(SerializeType::Json), &[0u8; 5000], &mut wire).unwrap();
        encode_into(&RemotingCommand::request(34, 2), b"ok", &mut wire).unwrap();
        let mut dec = RemotingDecoder::new(1024);
        let mut buf = BytesMut::new();
        let mut seen = Vec::new();
        for chunk in wire.chunks(700) {
            buf.extend_from_slice(chunk);
            seen.extend(dec.decode_all(&mut buf).unwrap());
        }
        assert_eq!(seen.len(), 2);
        match &seen[0] {
            Decoded::Oversized { command, frame_len } => {
                assert_eq!(command.as_ref().map(|c| c.opaque), Some(42));
                assert!(*frame_len > 5000);
            }
            other => panic!("expected oversized, got {other:?}"),
        }
        match &seen[1] {
            Decoded::Frame(f) => assert_eq!(f.command.opaque, 2),
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    #[test]
    fn limit_counts_the_length_word() {
        let wire = encode(&RemotingCommand::request(34, 1), b"").unwrap();
        let exact = wire.len() as u32;
        let mut buf = BytesMut::from(&wire[..]);
        assert!(matches!(
            RemotingDecoder::new(exact).decode(&mut buf).unwrap(),
            Some(Decoded::Frame(_))
        ));
        let mut buf = BytesMut::from(&wire[..]);
        assert!(matches!(
            RemotingDecoder::new(exact - 1).decode(&mut buf).unwrap(),
            Some(Decoded::Oversized { .. })
        ));
    }

    #[test]
    fn bad_prefixes_are_errors() {
        let cases: [&[u8]; 5] = [
            &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0], // negative length
            &[0, 0, 0, 3, 0, 0, 0, 0],             // shorter than the word
            &[0, 0, 0, 8, 0, 0, 0, 5],             // header longer than the frame
            &[0, 0, 0, 8, 2, 0, 0, 0],             // serialize type 2
            &[0x00, 0x20, 0, 0, 0, 0x20, 0, 0],    // 2 MiB header
        ];
        for c in cases {
            let mut buf = BytesMut::from(c);
            assert!(
                RemotingDecoder::default().decode(&mut buf).is_err(),
                "{c:?}"
            );
            assert!(decode_frame(Bytes::copy_from_slice(c)).is_err());
        }
        // A whole frame given to decode_frame must be exactly one frame.
        let wire = encode(&RemotingCommand::request(34, 1), b"x").unwrap();
        assert!(decode_frame(wire.slice(..wire.len() - 1)).is_err());
        let mut long = wire.to_vec();
        long.push(0);
        assert!(decode_frame(Bytes::from(long)).is_err());
    }

    /// A tiny deterministic generator, so the test needs no dependency and replays exactly.
    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn prefixes_and_mutations_never_panic() {
        let mut frames = Vec::new();
        for st in [SerializeType::Json, SerializeType::RocketMq] {
            frames.push(encode(&sample(st), b"payload").unwrap().to_vec());
        }
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for wire in &frames {
            for n in 0..=wire.len() {
                let _ = decode_frame(Bytes::copy_from_slice(&wire[..n]));
                let mut buf = BytesMut::from(&wire[..n]);
                let _ = RemotingDecoder::default().decode_all(&mut buf);
                let _ = decode_header(SerializeType::Json, &wire[..n]);
                let _ = decode_header(SerializeType::RocketMq, &wire[..n]);
            }
            for _ in 0..5000 {
                let mut m = wire.clone();
                for _ in 0..(1 + rng.next() % 4) {
                    let i = (rng.next() % m.len() as u64) as usize;
                    m[i] = rng.next() as u8;
                }
                let _ = decode_frame(Bytes::copy_from_slice(&m));
                let mut buf = BytesMut::from(&m[..]);
                let _ = RemotingDecoder::new(4096).decode_all(&mut buf);
                let _ = decode_header(SerializeType::RocketMq, &m[8..]);
            }
        }
    }
}
