//! Which addresses a request may reach only when a grant names them explicitly.
//!
//! Because a name's addresses are whatever its DNS says, a name is resolved first and
//! every address it resolves to is checked; the connection then goes to a checked address,
//! never to the name again, so a second answer cannot smuggle in another address.
//!
//! Public means globally reachable in IANA's special-purpose address registries: loopback,
//! private, link-local, unspecified, shared (carrier-grade NAT), IETF protocol
//! assignments (`192.0.0.0/24`), benchmarking (`198.18.0.0/15`), reserved (`240.0.0.0/4`),
//! broadcast and multicast addresses are restricted. An IPv6 address that carries an IPv4
//! one is judged by what it reaches: IPv4-mapped (`::ffff:a.b.c.d`) and well-known NAT64
//! (`64:ff9b::a.b.c.d`) addresses as the IPv4 address they carry; the local-use NAT64
//! prefix `64:ff9b:1::/48`, whose translators are the network's own, and the deprecated
//! IPv4-compatible addresses (`::a.b.c.d`) are restricted whatever they carry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is not a public address, or `None` when it is one; see the [module](self)
/// docs for what counts.
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
    let [a, b, c, _] = ip.octets();
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
    } else if a >= 240 {
        Some("a reserved address")
    } else if a == 198 && (b == 18 || b == 19) {
        Some("a benchmarking address")
    } else if a == 192 && b == 0 && c == 0 {
        Some("an IETF protocol assignment address")
    } else {
        None
    }
}

fn restricted_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    let first = segments[0];
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("an unspecified address")
    } else if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        restricted_v4(embedded_v4(ip))
    } else if segments[..3] == [0x64, 0xff9b, 1] {
        Some("a local-use NAT64 address")
    } else if segments[..6] == [0; 6] {
        Some("an IPv4-compatible address")
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

/// The IPv4 address in the last 32 bits of `ip`.
fn embedded_v4(ip: Ipv6Addr) -> Ipv4Addr {
    let [.., a, b, c, d] = ip.octets();
    Ipv4Addr::new(a, b, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(ip: &str) -> Option<&'static str> {
        restricted(ip.parse().expect("an address"))
    }

    /// Every address class, with an address at each edge, and what it is judged as.
    const CLASSES: &[(&str, Option<&str>)] = &[
        ("127.0.0.1", Some("a loopback address")),
        ("127.8.9.10", Some("a loopback address")),
        ("10.1.2.3", Some("a private address")),
        ("172.16.0.1", Some("a private address")),
        ("192.168.1.1", Some("a private address")),
        ("169.254.169.254", Some("a link-local address")),
        ("0.0.0.0", Some("an unspecified address")),
        ("0.1.2.3", Some("an unspecified address")),
        ("100.64.0.0", Some("a shared (carrier-grade NAT) address")),
        (
            "100.127.255.255",
            Some("a shared (carrier-grade NAT) address"),
        ),
        ("100.63.255.255", None),
        ("100.128.0.0", None),
        ("198.18.0.0", Some("a benchmarking address")),
        ("198.19.255.255", Some("a benchmarking address")),
        ("198.17.255.255", None),
        ("198.20.0.0", None),
        ("192.0.0.0", Some("an IETF protocol assignment address")),
        ("192.0.0.255", Some("an IETF protocol assignment address")),
        ("192.0.1.0", None),
        ("240.0.0.0", Some("a reserved address")),
        ("250.1.2.3", Some("a reserved address")),
        ("255.255.255.254", Some("a reserved address")),
        ("255.255.255.255", Some("a broadcast or multicast address")),
        ("224.0.0.1", Some("a broadcast or multicast address")),
        ("239.255.255.255", Some("a broadcast or multicast address")),
        ("93.184.216.34", None),
        ("172.32.0.1", None),
        ("::1", Some("a loopback address")),
        ("::", Some("an unspecified address")),
        ("fd00::1", Some("a private address")),
        ("fe80::1", Some("a link-local address")),
        ("ff02::1", Some("a broadcast or multicast address")),
        ("2606:2800:220:1::1", None),
        // IPv4-mapped: the IPv4 address it carries.
        ("::ffff:127.0.0.1", Some("a loopback address")),
        ("::ffff:10.0.0.1", Some("a private address")),
        ("::ffff:198.18.0.1", Some("a benchmarking address")),
        ("::ffff:93.184.216.34", None),
        // Well-known NAT64: the IPv4 address it carries.
        ("64:ff9b::127.0.0.1", Some("a loopback address")),
        ("64:ff9b::10.0.0.1", Some("a private address")),
        ("64:ff9b::169.254.169.254", Some("a link-local address")),
        (
            "64:ff9b::100.64.0.1",
            Some("a shared (carrier-grade NAT) address"),
        ),
        ("64:ff9b::93.184.216.34", None),
        // Local-use NAT64 and IPv4-compatible: whatever they carry.
        ("64:ff9b:1::10.0.0.1", Some("a local-use NAT64 address")),
        (
            "64:ff9b:1:ffff::93.184.216.34",
            Some("a local-use NAT64 address"),
        ),
        ("::127.0.0.1", Some("an IPv4-compatible address")),
        ("::93.184.216.34", Some("an IPv4-compatible address")),
        ("::2", Some("an IPv4-compatible address")),
        // Neighbours of those prefixes are judged as themselves.
        ("64:ff9b:2::1", None),
        ("64:ff9a::1", None),
    ];

    #[test]
    fn each_address_class_is_judged_as_the_table_says() {
        let wrong: Vec<String> = CLASSES
            .iter()
            .filter(|(ip, expected)| kind(ip) != *expected)
            .map(|(ip, expected)| format!("{ip}: {:?}, expected {expected:?}", kind(ip)))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}
