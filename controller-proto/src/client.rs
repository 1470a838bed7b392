//! A small blocking client for mqadmin and tests.
//!
//! It keeps one connection, to the controller it believes leads. A `NotLeader` answer names
//! the leader and the request is re-sent there; a failed connection moves on to the next
//! address. Every call is bounded twice: by a number of attempts and by a deadline, so a
//! controller group without a leader makes a call fail, not hang.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::encode_signed;
use crate::frame::{body_len, decode, FRAME_HEADER_BYTES};
use crate::{ProtoError, Request, Response};

/// Bounds of a [`Client`]'s calls.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Connect, read and write timeout of one attempt.
    pub io_timeout_ms: u64,
    /// Attempts of one call, counting redirects and reconnects.
    pub attempts_max: u32,
    /// Deadline of one call over all its attempts.
    pub call_timeout_ms: u64,
    /// Pause after a round in which no controller named a leader (an election is likely
    /// under way).
    pub retry_backoff_ms: u64,
    /// Sign every request with this account (controllers with access control on take
    /// nothing else); each attempt is signed anew, so a re-send is never a replay.
    pub credentials: Option<acl::Credentials>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            io_timeout_ms: 2000,
            attempts_max: 20,
            call_timeout_ms: 10_000,
            retry_backoff_ms: 100,
            credentials: None,
        }
    }
}

/// A blocking connection to a controller group.
#[derive(Debug)]
pub struct Client {
    addrs: Vec<String>,
    /// Index into `addrs` of the controller tried next.
    current: usize,
    conn: Option<TcpStream>,
    config: ClientConfig,
}

impl Client {
    /// A client of the controllers at `addrs`. It connects lazily, at the first call, so a
    /// group whose first controller is down is still usable.
    pub fn connect<S: AsRef<str>>(addrs: &[S]) -> Result<Client, ProtoError> {
        Self::with_config(addrs, ClientConfig::default())
    }

    pub fn with_config<S: AsRef<str>>(
        addrs: &[S],
        config: ClientConfig,
    ) -> Result<Client, ProtoError> {
        let addrs: Vec<String> = addrs
            .iter()
            .map(|a| a.as_ref().trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        if addrs.is_empty() {
            return Err(ProtoError::NoAddress);
        }
        Ok(Client {
            addrs,
            current: 0,
            conn: None,
            config,
        })
    }

    /// The address the client sends to next (the leader, after a successful call).
    pub fn current_addr(&self) -> &str {
        &self.addrs[self.current]
    }

    /// Sends `req` and returns the leader's answer, following `NotLeader` redirects.
    /// `Refused` is an answer, returned as `Ok`.
    pub fn call(&mut self, req: &Request) -> Result<Response, ProtoError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.call_timeout_ms);
        let mut last = String::from("none");
        let mut since_leader_hint = 0usize;
        for attempt in 1..=self.config.attempts_max {
            if attempt > 1 && Instant::now() >= deadline {
                return Err(ProtoError::NoLeader {
                    attempts: attempt - 1,
                    last,
                });
            }
            let frame = encode_signed(req, self.config.credentials.as_ref())?;
            match self.round_trip(&frame) {
                Ok(Response::NotLeader { leader: Some(l) }) if l != self.current_addr() => {
                    last = format!("{} is not the leader, it names {l}", self.current_addr());
                    self.redirect(&l);
                    since_leader_hint = 0;
                }
                Ok(Response::NotLeader { .. }) => {
                    last = format!("{} is not the leader and knows none", self.current_addr());
                    self.next_addr();
                    since_leader_hint += 1;
                }
                Ok(resp) => return Ok(resp),
                Err(e) => {
                    last = e.to_string();
                    self.next_addr();
                    since_leader_hint += 1;
                }
            }
            // A whole round of addresses without a leader: wait a little for an election.
            if since_leader_hint >= self.addrs.len() {
                since_leader_hint = 0;
                std::thread::sleep(Duration::from_millis(self.config.retry_backoff_ms));
            }
        }
        Err(ProtoError::NoLeader {
            attempts: self.config.attempts_max,
            last,
        })
    }

    /// Asks the controller at the current address only, without following redirects (to
    /// see what one controller says).
    pub fn call_one(&mut self, req: &Request) -> Result<Response, ProtoError> {
        let frame = encode_signed(req, self.config.credentials.as_ref())?;
        self.round_trip(&frame)
    }

    fn redirect(&mut self, leader: &str) {
        self.conn = None;
        match self.addrs.iter().position(|a| a == leader) {
            Some(i) => self.current = i,
            None => {
                self.addrs.push(leader.to_owned());
                self.current = self.addrs.len() - 1;
            }
        }
    }

    fn next_addr(&mut self) {
        self.conn = None;
        self.current = (self.current + 1) % self.addrs.len();
    }

    fn round_trip(&mut self, frame: &[u8]) -> Result<Response, ProtoError> {
        let addr = self.current_addr().to_owned();
        let io = |source| ProtoError::Io {
            addr: addr.clone(),
            source,
        };
        if self.conn.is_none() {
            self.conn = Some(open(&addr, self.config.io_timeout_ms).map_err(io)?);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(ProtoError::Closed { addr });
        };
        let result = exchange(conn, frame, &addr);
        if result.is_err() {
            // The stream may be out of step (half a frame read): never reuse it.
            self.conn = None;
        }
        result
    }
}

fn open(addr: &str, timeout_ms: u64) -> std::io::Result<TcpStream> {
    let timeout = Duration::from_millis(timeout_ms.max(1));
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "address resolved to nothing");
    for sa in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&sa, timeout) {
            Ok(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn exchange(conn: &mut TcpStream, frame: &[u8], addr: &str) -> Result<Response, ProtoError> {
    let io = |source| ProtoError::Io {
        addr: addr.to_owned(),
        source,
    };
    conn.write_all(frame).map_err(io)?;
    let mut header = [0u8; FRAME_HEADER_BYTES];
    read_exact(conn, &mut header, addr)?;
    let mut body = vec![0u8; body_len(header)?];
    read_exact(conn, &mut body, addr)?;
    decode(&body)
}

fn read_exact(conn: &mut TcpStream, buf: &mut [u8], addr: &str) -> Result<(), ProtoError> {
    conn.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ProtoError::Closed {
                addr: addr.to_owned(),
            }
        } else {
            ProtoError::Io {
                addr: addr.to_owned(),
                source: e,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode;
    use std::net::TcpListener;

    /// A one-connection server that answers each request with the next canned answer.
    fn canned(answers: Vec<Response>) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            for a in answers {
                let mut h = [0u8; 4];
                if s.read_exact(&mut h).is_err() {
                    return;
                }
                let mut b = vec![0u8; body_len(h).unwrap()];
                s.read_exact(&mut b).unwrap();
                let _: Request = decode(&b).unwrap();
                s.write_all(&encode(&a).unwrap()).unwrap();
            }
        });
        addr
    }

    #[test]
    fn follows_not_leader_to_the_named_leader() {
        let leader = canned(vec![Response::Refused {
            reason: "from the leader".into(),
        }]);
        let follower = canned(vec![Response::NotLeader {
            leader: Some(leader.clone()),
        }]);
        let mut c = Client::connect(&[follower]).unwrap();
        let r = c.call(&Request::GetMetadata).unwrap();
        assert_eq!(
            r,
            Response::Refused {
                reason: "from the leader".into()
            }
        );
        assert_eq!(c.current_addr(), leader);
    }

    #[test]
    fn gives_up_within_its_bounds_when_nothing_answers() {
        // A port that was free a moment ago: connections are refused.
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let cfg = ClientConfig {
            io_timeout_ms: 200,
            attempts_max: 4,
            call_timeout_ms: 2000,
            retry_backoff_ms: 10,
            credentials: None,
        };
        let mut c = Client::with_config(&[dead], cfg).unwrap();
        let started = Instant::now();
        assert!(matches!(
            c.call(&Request::GetMetadata),
            Err(ProtoError::NoLeader { .. })
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn no_address_is_an_error() {
        let none: [&str; 0] = [];
        assert!(matches!(Client::connect(&none), Err(ProtoError::NoAddress)));
    }
}
