//! IP allow-list patterns of `plain_acl.yml` (`globalWhiteRemoteAddresses`,
//! `whiteRemoteAddress`), as RocketMQ's `RemoteAddressStrategyFactory` reads them:
//!
//! * blank: matches nobody;
//! * `*`, `*.*.*.*`, `*:*:*:*:*:*:*:*`: matches everybody;
//! * `a.b.c.{1,2,3}` (or an IPv6 address whose last group is `{..}`): any of the listed last
//!   parts;
//! * `1.2.3.4,1.2.3.5`: any of the listed addresses;
//! * `a.b.c.*`, `a.b.*.*`, `a.b.c.1-20` (IPv6: `a:b:*:*:*:*:*:*`, `a:b:c:1-ff:*:*:*:*`): a
//!   fixed head, then one segment that is `*` or a range, then only `*`;
//! * otherwise one address, IPv4 or IPv6 (compared in full, so `::1` matches `0:0:..:1`).
//!
//! A peer on an IPv4-mapped IPv6 socket (`::ffff:1.2.3.4`) is matched as its IPv4 address.

use std::net::{IpAddr, Ipv4Addr};

/// A parsed allow-list pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddrPattern {
    /// A blank pattern: nobody (RocketMQ's BlankRemoteAddressStrategy).
    Nobody,
    /// `*`: everybody.
    Anybody,
    /// Any of these addresses.
    OneOf(Vec<IpAddr>),
    /// Segment by segment (4 for IPv4, 8 for IPv6): each an inclusive range.
    Segments { v6: bool, ranges: Vec<(u16, u16)> },
}

impl AddrPattern {
    /// Parses one pattern; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<AddrPattern, String> {
        let t = text.trim();
        if t.is_empty() {
            return Ok(AddrPattern::Nobody);
        }
        if t == "*" || t == "*.*.*.*" || t == "*:*:*:*:*:*:*:*" {
            return Ok(AddrPattern::Anybody);
        }
        if t.ends_with('}') {
            return parse_braces(t);
        }
        if t.contains(',') {
            let addrs = t
                .split(',')
                .map(|a| parse_ip(a.trim()))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(AddrPattern::OneOf(addrs));
        }
        if t.contains('*') || t.contains('-') {
            return parse_range(t);
        }
        Ok(AddrPattern::OneOf(vec![parse_ip(t)?]))
    }

    /// Whether `peer` is allowed by this pattern.
    pub fn matches(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        match self {
            AddrPattern::Nobody => false,
            AddrPattern::Anybody => true,
            AddrPattern::OneOf(addrs) => addrs.iter().any(|a| a.to_canonical() == peer),
            AddrPattern::Segments { v6, ranges } => {
                let segs: Vec<u16> = match (peer, v6) {
                    (IpAddr::V4(a), false) => a.octets().iter().map(|&o| o as u16).collect(),
                    (IpAddr::V6(a), true) => a.segments().to_vec(),
                    _ => return false,
                };
                segs.iter()
                    .zip(ranges)
                    .all(|(s, (lo, hi))| *lo <= *s && *s <= *hi)
            }
        }
    }
}

fn parse_ip(t: &str) -> Result<IpAddr, String> {
    t.parse::<IpAddr>()
        .map_err(|_| format!("`{t}` is not an IPv4 or IPv6 address"))
}

/// `a.b.c.{1,2}` or `a:b:..:{1,2}`: the head with each listed last part.
fn parse_braces(t: &str) -> Result<AddrPattern, String> {
    let open = t
        .rfind('{')
        .ok_or_else(|| format!("`{t}`: a `}}` without its `{{`"))?;
    let head = &t[..open];
    let v6 = head.ends_with(':');
    if !v6 && !head.ends_with('.') {
        return Err(format!(
            "`{t}`: the braces must hold the last part of the address"
        ));
    }
    if !v6 && head.matches('.').count() != 3 {
        return Err(format!("`{t}`: an IPv4 pattern has four parts"));
    }
    let inner = &t[open + 1..t.len() - 1];
    let addrs = inner
        .split(',')
        .map(|last| parse_ip(&format!("{head}{}", last.trim())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AddrPattern::OneOf(addrs))
}

/// `a.b.c.*`, `a.b.c.1-20`, `a.b.*.*`; IPv6 the same with 8 hexadecimal groups.
fn parse_range(t: &str) -> Result<AddrPattern, String> {
    let v6 = t.contains(':');
    let (parts, count, max, radix): (Vec<&str>, usize, u32, u32) = if v6 {
        (t.split(':').collect(), 8, 0xffff, 16)
    } else {
        (t.split('.').collect(), 4, 255, 10)
    };
    let mut parts = parts;
    // Like RocketMQ, a shorter pattern is completed with `*` (`10.1.*` is `10.1.*.*`).
    if parts.len() > count || parts.len() < 2 {
        return Err(format!(
            "`{t}`: an {} pattern has {count} parts",
            if v6 { "IPv6" } else { "IPv4" }
        ));
    }
    while parts.len() < count {
        parts.push("*");
    }
    let num = |s: &str| -> Result<u16, String> {
        match u32::from_str_radix(s.trim(), radix) {
            Ok(n) if n <= max => Ok(n as u16),
            _ => Err(format!("`{t}`: `{s}` is not a part of an address")),
        }
    };
    let mut ranges = Vec::with_capacity(count);
    let mut open = false; // a `*` or range seen: only `*` may follow
    for (i, p) in parts.iter().enumerate() {
        let p = p.trim();
        let range = if p == "*" {
            (0, max as u16)
        } else if let Some((lo, hi)) = p.split_once('-') {
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi || open {
                return Err(format!("`{t}`: bad range `{p}`"));
            }
            (lo, hi)
        } else {
            if open {
                return Err(format!("`{t}`: after a `*` or a range only `*` may follow"));
            }
            let n = num(p)?;
            (n, n)
        };
        if i == 0 && range != (range.0, range.0) {
            return Err(format!("`{t}`: the first part must be a number"));
        }
        if p == "*" || p.contains('-') {
            open = true;
        }
        ranges.push(range);
    }
    Ok(AddrPattern::Segments { v6, ranges })
}

/// The loopback address, for callers that have no peer (a test, an in-process call).
pub const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn m(p: &str, a: &str) -> bool {
        AddrPattern::parse(p).unwrap().matches(ip(a))
    }

    #[test]
    fn rocketmq_patterns() {
        assert!(!m("", "1.2.3.4"));
        assert!(m("*", "1.2.3.4"));
        assert!(m("*.*.*.*", "::1"));
        assert!(m("192.168.0.*", "192.168.0.77"));
        assert!(!m("192.168.0.*", "192.168.1.77"));
        assert!(m("192.168.*.*", "192.168.9.1"));
        assert!(m("192.168.*", "192.168.9.1"));
        assert!(m("192.168.1.1-20", "192.168.1.20"));
        assert!(!m("192.168.1.1-20", "192.168.1.21"));
        assert!(m("192.168.1-3.*", "192.168.3.200"));
        assert!(!m("192.168.1-3.*", "192.168.4.0"));
        assert!(m("192.168.1.{1,2,3}", "192.168.1.2"));
        assert!(!m("192.168.1.{1,2,3}", "192.168.1.4"));
        assert!(m("1.2.3.4,5.6.7.8", "5.6.7.8"));
        assert!(m("127.0.0.1", "127.0.0.1"));
        assert!(m("127.0.0.1", "::ffff:127.0.0.1"));
        assert!(!m("127.0.0.1", "127.0.0.2"));
        assert!(m("::1", "0:0:0:0:0:0:0:1"));
        assert!(m("1050:0:0:0:5:600:300c:*", "1050::5:600:300c:326b"));
        assert!(m("1050:0:0:0:5:600:300c:1-ff", "1050::5:600:300c:fe"));
        assert!(!m("1050:0:0:0:5:600:300c:1-ff", "1050::5:600:300c:100"));
        assert!(m("1050::5:600:300c:{326a,326b}", "1050::5:600:300c:326b"));
        assert!(!m("192.168.0.*", "1050::5:600:300c:326b"));
    }

    #[test]
    fn bad_patterns_are_errors() {
        for p in [
            "192.168.1.300",
            "192.168.*.1",
            "192.168.1.20-1",
            "*.168.1.1",
            "10.1.2.3.4.*",
            "192.168.{1,2}.3}",
            "10.0.0.{1,x}",
            "hello",
        ] {
            assert!(AddrPattern::parse(p).is_err(), "{p} should be refused");
        }
    }
}
