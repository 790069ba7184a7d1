//! Which addresses a request may reach only when a grant names them explicitly.
//!
//! Because a name's addresses are whatever its DNS says, a name is resolved first and
//! every address it resolves to is checked; the connection then goes to a checked address,
//! never to the name again, so a second answer cannot smuggle in another address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is not a public address, or `None` when it is one. IPv4 addresses written as
/// IPv6 (`::ffff:127.0.0.1`) are judged as the IPv4 address they carry.
pub fn restricted(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => restricted_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => restricted_v4(v4),
            None => restricted_v6(v6),
        },
    }
}

fn restricted_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_private() {
        Some("a private address")
    } else if ip.is_link_local() {
        Some("a link-local address")
    } else if ip.is_unspecified() || a == 0 {
        Some("an unspecified address")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a shared (carrier-grade NAT) address")
    } else if ip.is_broadcast() || ip.is_multicast() {
        Some("a broadcast or multicast address")
    } else {
        None
    }
}

fn restricted_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("an unspecified address")
    } else if first & 0xfe00 == 0xfc00 {
        Some("a private address")
    } else if first & 0xffc0 == 0xfe80 {
        Some("a link-local address")
    } else if ip.is_multicast() {
        Some("a broadcast or multicast address")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(ip: &str) -> Option<&'static str> {
        restricted(ip.parse().expect("an address"))
    }

    #[test]
    fn loopback_private_link_local_and_unspecified_addresses_are_restricted() {
        assert_eq!(kind("127.0.0.1"), Some("a loopback address"));
        assert_eq!(kind("127.8.9.10"), Some("a loopback address"));
        assert_eq!(kind("10.1.2.3"), Some("a private address"));
        assert_eq!(kind("172.16.0.1"), Some("a private address"));
        assert_eq!(kind("192.168.1.1"), Some("a private address"));
        assert_eq!(kind("169.254.169.254"), Some("a link-local address"));
        assert_eq!(kind("0.0.0.0"), Some("an unspecified address"));
        assert_eq!(
            kind("100.64.0.1"),
            Some("a shared (carrier-grade NAT) address")
        );
        assert_eq!(kind("::1"), Some("a loopback address"));
        assert_eq!(kind("::"), Some("an unspecified address"));
        assert_eq!(kind("fd00::1"), Some("a private address"));
        assert_eq!(kind("fe80::1"), Some("a link-local address"));
    }

    #[test]
    fn an_ipv4_address_written_as_ipv6_is_judged_as_itself() {
        assert_eq!(kind("::ffff:127.0.0.1"), Some("a loopback address"));
        assert_eq!(kind("::ffff:10.0.0.1"), Some("a private address"));
        assert_eq!(kind("::ffff:93.184.216.34"), None);
    }

    #[test]
    fn public_addresses_are_not_restricted() {
        assert_eq!(kind("93.184.216.34"), None);
        assert_eq!(kind("172.32.0.1"), None);
        assert_eq!(kind("2606:2800:220:1::1"), None);
    }
}
