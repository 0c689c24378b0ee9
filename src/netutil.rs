//! The machine's default host (etcd's `netutil.GetDefaultHost`): the address this machine
//! sends from on its default route. etcd advertises it in place of `localhost` when a member
//! keeps the default advertised URL but listens on `0.0.0.0` (see
//! [`crate::config::Config::use_default_host`]), and so derives its member id from it.

use std::net::{Ipv4Addr, UdpSocket};

/// The IPv4 address this machine sends from on its default route, if it has one: the route's
/// preferred source, else its interface's address, as the kernel picks it. The gateway comes
/// from `/proc/net/route`, and the kernel's choice from a UDP socket connected to it: connecting
/// a UDP socket only looks the route up, it sends nothing.
pub fn default_host() -> Option<Ipv4Addr> {
    let routes = std::fs::read_to_string("/proc/net/route").ok()?;
    let gateway = default_gateway(&routes)?;
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect((gateway, 9)).ok()?;
    match socket.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(ip) if !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

/// The gateway of the default route (destination and mask 0) in `/proc/net/route`'s format,
/// whose addresses are the network-order bytes printed as one hexadecimal number in the
/// machine's byte order.
fn default_gateway(routes: &str) -> Option<Ipv4Addr> {
    routes.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (dest, gateway, mask) = (f.get(1)?, f.get(2)?, f.get(7)?);
        if *dest != "00000000" || *mask != "00000000" {
            return None;
        }
        let g = u32::from_str_radix(gateway, 16).ok()?;
        (g != 0).then(|| Ipv4Addr::from(g.to_ne_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_routes_gateway_is_read_from_proc_net_route() {
        let routes = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                      eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                      eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert_eq!(default_gateway(routes), Some(Ipv4Addr::new(192, 0, 2, 1)));
        let no_default = "Iface\tDestination\tGateway\n\
                          eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(default_gateway(no_default), None);
    }
}
