//! The remoting command: what one frame's header says.

/// `flag` bit 0: this command is a response.
pub const FLAG_RESPONSE: i32 = 1;
/// `flag` bit 1: the sender expects no response.
pub const FLAG_ONEWAY: i32 = 2;

pub use crate::ext_fields::ExtFields;

/// How a frame's header is written: the top byte of the frame's second word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SerializeType {
    #[default]
    Json,
    RocketMq,
}

impl SerializeType {
    pub fn code(self) -> u8 {
        match self {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        }
    }

    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(SerializeType::Json),
            1 => Some(SerializeType::RocketMq),
            _ => None,
        }
    }

    /// The name Java writes in `serializeTypeCurrentRPC`.
    pub fn name(self) -> &'static str {
        match self {
            SerializeType::Json => "JSON",
            SerializeType::RocketMq => "ROCKETMQ",
        }
    }
}

/// The sender's implementation language (Java `LanguageCode`): a name in JSON headers, a byte
/// in binary ones. Codes nobody defined are kept as [`LanguageCode::Unknown`] so that they
/// survive a round trip; unknown names become [`LanguageCode::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LanguageCode {
    #[default]
    Java,
    Cpp,
    Dotnet,
    Python,
    Delphi,
    Erlang,
    Ruby,
    Other,
    Http,
    Go,
    Php,
    Oms,
    Rust,
    Unknown(u8),
}

const LANGUAGES: [(LanguageCode, &str); 13] = [
    (LanguageCode::Java, "JAVA"),
    (LanguageCode::Cpp, "CPP"),
    (LanguageCode::Dotnet, "DOTNET"),
    (LanguageCode::Python, "PYTHON"),
    (LanguageCode::Delphi, "DELPHI"),
    (LanguageCode::Erlang, "ERLANG"),
    (LanguageCode::Ruby, "RUBY"),
    (LanguageCode::Other, "OTHER"),
    (LanguageCode::Http, "HTTP"),
    (LanguageCode::Go, "GO"),
    (LanguageCode::Php, "PHP"),
    (LanguageCode::Oms, "OMS"),
    (LanguageCode::Rust, "RUST"),
];

impl LanguageCode {
    pub fn code(self) -> u8 {
        match self {
            LanguageCode::Unknown(c) => c,
            known => LANGUAGES
                .iter()
                .position(|(l, _)| *l == known)
                .map_or(7, |i| i as u8),
        }
    }

    pub fn from_code(code: u8) -> Self {
        LANGUAGES
            .get(code as usize)
            .map_or(LanguageCode::Unknown(code), |(l, _)| *l)
    }

    /// The Java enum name; `Unknown` codes are written as `OTHER` (a JSON header has no way to
    /// carry a number Java would accept).
    pub fn name(self) -> &'static str {
        LANGUAGES
            .iter()
            .find(|(l, _)| *l == self)
            .map_or("OTHER", |(_, n)| n)
    }

    pub fn from_name(name: &str) -> Self {
        LANGUAGES
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(name))
            .map_or(LanguageCode::Other, |(l, _)| *l)
    }
}

/// One remoting command: the header of a request or a response. The body travels beside it
/// in a [`crate::Frame`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemotingCommand {
    /// Request code for requests, response code for responses. i32 in JSON, i16 in binary.
    pub code: i32,
    pub language: LanguageCode,
    /// The sender's Java `MQVersion` ordinal (401 = V4_9_4).
    pub version: i32,
    /// Request id; a response echoes its request's.
    pub opaque: i32,
    /// Bit 0 response, bit 1 oneway.
    pub flag: i32,
    pub remark: Option<String>,
    pub ext_fields: ExtFields,
    pub serialize_type: SerializeType,
}

impl RemotingCommand {
    /// A request with this code and opaque, JSON, no fields.
    pub fn request(code: i32, opaque: i32) -> Self {
        RemotingCommand {
            code,
            opaque,
            ..RemotingCommand::default()
        }
    }

    /// The response to `request`: echoes its opaque, sets the response flag and keeps its
    /// serialize type (a server must answer in the form it was asked in).
    pub fn response_to(request: &RemotingCommand, code: i32, remark: Option<String>) -> Self {
        RemotingCommand {
            code,
            language: LanguageCode::Java,
            version: request.version,
            opaque: request.opaque,
            flag: FLAG_RESPONSE,
            remark,
            ext_fields: ExtFields::new(),
            serialize_type: request.serialize_type,
        }
    }

    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    pub fn set_oneway(&mut self) {
        self.flag |= FLAG_ONEWAY;
    }

    /// Builder-style: adds every field of `fields` to `extFields`.
    pub fn with_ext_fields(mut self, fields: ExtFields) -> Self {
        if self.ext_fields.is_empty() {
            self.ext_fields = fields;
        } else {
            self.ext_fields.extend_from(&fields);
        }
        self
    }

    pub fn ext(&self, key: &str) -> Option<&str> {
        self.ext_fields.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_codes_match_java() {
        assert_eq!(LanguageCode::Java.code(), 0);
        assert_eq!(LanguageCode::Cpp.code(), 1);
        assert_eq!(LanguageCode::Go.code(), 9);
        assert_eq!(LanguageCode::Rust.code(), 12);
        assert_eq!(LanguageCode::from_code(9), LanguageCode::Go);
        assert_eq!(LanguageCode::from_code(200), LanguageCode::Unknown(200));
        assert_eq!(LanguageCode::Unknown(200).code(), 200);
        assert_eq!(LanguageCode::from_name("CPP"), LanguageCode::Cpp);
        assert_eq!(LanguageCode::from_name("NODE_JS"), LanguageCode::Other);
        for code in 0..=12u8 {
            let l = LanguageCode::from_code(code);
            assert_eq!(LanguageCode::from_name(l.name()), l);
            assert_eq!(l.code(), code);
        }
    }

    #[test]
    fn response_echoes_opaque_and_serialize_type() {
        let mut req = RemotingCommand::request(105, 77);
        req.serialize_type = SerializeType::RocketMq;
        req.version = 401;
        assert!(!req.is_response());
        assert!(!req.is_oneway());
        let resp = RemotingCommand::response_to(&req, 17, Some("no route".into()));
        assert_eq!(resp.opaque, 77);
        assert!(resp.is_response());
        assert!(!resp.is_oneway());
        assert_eq!(resp.serialize_type, SerializeType::RocketMq);
        assert_eq!(resp.code, 17);
        assert_eq!(resp.remark.as_deref(), Some("no route"));
        req.set_oneway();
        assert!(req.is_oneway());
        assert_eq!(req.flag, 2);
    }
}
