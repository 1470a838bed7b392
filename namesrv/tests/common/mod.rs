//! Shared harness of the crate tests: an in-process NameServer on loopback and a blocking
//! client speaking the wire protocol. Every read is bounded by a timeout.

#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use namesrv::{NameServerConfig, NameServerHandle};
use protocol::blocking::{write_frame, FrameReader};
use protocol::{
    perm, BrokerKey, Command, Frame, Header, RegisterBroker, ResponseCode, TopicConfig,
};

/// No single response may take longer than this; a hung server fails the test instead.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

pub fn start_server(broker_expiry_ms: u64) -> NameServerHandle {
    namesrv::start(NameServerConfig {
        listen_addr: "127.0.0.1:0".parse().expect("literal address"),
        broker_expiry_ms,
        ..NameServerConfig::default()
    })
    .expect("name server starts on loopback")
}

pub struct Client {
    reader: FrameReader<TcpStream>,
    next_request_id: u64,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        stream.set_write_timeout(Some(IO_TIMEOUT)).expect("timeout");
        Client {
            reader: FrameReader::new(stream, protocol::FRAME_BYTES_MAX_DEFAULT),
            next_request_id: 1000,
        }
    }

    pub fn next_id(&mut self) -> u64 {
        self.next_request_id += 1;
        self.next_request_id
    }

    pub fn stream(&self) -> &TcpStream {
        self.reader.get_ref()
    }

    pub fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut s = self.reader.get_ref();
        s.write_all(bytes)?;
        s.flush()
    }

    pub fn send(&mut self, header: &Header, body: &[u8]) {
        write_frame(&mut self.reader.get_ref(), header, body).expect("write frame");
    }

    /// The next frame, `None` at end of stream, an `Io` error on reset or after `IO_TIMEOUT`.
    pub fn read(&mut self) -> Result<Option<Frame>, protocol::ProtocolError> {
        self.reader.next_frame()
    }

    /// Sends a request and returns its response, checking the echoed id and response flag.
    pub fn call(&mut self, command: Command) -> Header {
        self.call_with_body(command).header
    }

    pub fn call_with_body(&mut self, command: Command) -> protocol::Frame {
        let id = self.next_id();
        self.send(&Header::request(id, command), &[]);
        let frame = self
            .read()
            .expect("response arrives")
            .expect("connection stays open");
        assert_eq!(
            frame.header.request_id, id,
            "response echoes the request id"
        );
        assert!(frame.header.is_response(), "response flag set");
        frame
    }

    pub fn register(&mut self, reg: RegisterBroker) {
        let resp = self.call(Command::RegisterBroker(reg));
        assert_eq!(
            resp.response_code(),
            ResponseCode::Success,
            "{}",
            resp.remark
        );
        assert_eq!(resp.command, Command::Empty);
    }

    pub fn topic_list(&mut self) -> Vec<String> {
        let frame = self.call_with_body(Command::GetTopicList);
        match frame.header.command {
            Command::TopicListBody { count } => {
                let names = protocol::decode_topic_names(&frame.body).expect("a valid body");
                assert_eq!(names.len(), count as usize);
                names
            }
            other => panic!("expected a topic list, got {other:?}"),
        }
    }
}

pub fn topic(name: &str, queues: u32) -> TopicConfig {
    TopicConfig {
        name: name.into(),
        read_queues: queues,
        write_queues: queues,
        perm: perm::READ_WRITE,
    }
}

pub fn registration(
    broker_name: &str,
    broker_id: u64,
    addr: &str,
    topics: &[TopicConfig],
) -> RegisterBroker {
    RegisterBroker {
        key: BrokerKey {
            cluster: "DefaultCluster".into(),
            broker_name: broker_name.into(),
            broker_id,
        },
        addr: addr.into(),
        core_addrs: vec![format!("{addr}#0"), format!("{addr}#1")],
        shard_count: 2,
        topics: topics.to_vec(),
        master_epoch: 0,
    }
}
