//! Kernel-chosen ports: bind to port 0, and the implicit bind of connect and listen on a socket without a port,
//! get the next port of the controller's seeded sequence ([`repro_detcore::ports`]). The supervisor binds the
//! guest's socket itself (a borrowed descriptor: the same socket), skipping ports in use, and answers with the
//! result; connect and listen then run natively on the bound socket. Only in the guest's own network namespace:
//! on the host's network the kernel's choice stays, with a warning in the run record.

use repro_detcore::ports::{PortUse, BIND_ATTEMPTS, HOST_NETWORK_PORTS};
use repro_sys::net;

use crate::guest::Guest;
use crate::reply::{Outcome, Refusal};
use crate::state::Shared;

/// Where the port sits in a socket address of `family`, and the shortest such address.
fn port_offset(family: i32) -> Option<usize> {
    match family {
        libc::AF_INET | libc::AF_INET6 => Some(2),
        _ => None,
    }
}

fn min_len(family: i32) -> usize {
    if family == libc::AF_INET6 {
        std::mem::size_of::<libc::sockaddr_in6>()
    } else {
        std::mem::size_of::<libc::sockaddr_in>()
    }
}

fn family_of(addr: &[u8]) -> i32 {
    if addr.len() < 2 {
        return libc::AF_UNSPEC;
    }
    i32::from(u16::from_ne_bytes([addr[0], addr[1]]))
}

fn port_of(addr: &[u8]) -> u16 {
    u16::from_be_bytes([addr[2], addr[3]])
}

/// Whether the address part of an inet socket address is the unspecified one (0.0.0.0 or ::).
fn unspecified(addr: &[u8]) -> bool {
    match family_of(addr) {
        libc::AF_INET => addr.get(4..8).is_some_and(|a| a.iter().all(|&b| b == 0)),
        libc::AF_INET6 => addr.get(8..24).is_some_and(|a| a.iter().all(|&b| b == 0)),
        _ => false,
    }
}

/// Binds `fd` to `addr` with the port replaced by the run's next ports until one is free.
fn bind_allocated<G: Guest>(sh: &mut Shared, g: &mut G, fd: i32, mut addr: Vec<u8>) -> Outcome {
    let sock = g.borrow_fd(fd)?;
    if !g.still_waiting() {
        return Err(libc::EINTR.into());
    }
    for _ in 0..BIND_ATTEMPTS {
        let port = sh.ctl.ephemeral_port();
        addr[2..4].copy_from_slice(&port.to_be_bytes());
        match net::bind(&sock, &addr) {
            Ok(()) => return Ok(0),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => continue,
            Err(e) => return Err(e.raw_os_error().unwrap_or(libc::EIO).into()),
        }
    }
    Err(libc::EADDRINUSE.into())
}

/// The host network case: the call runs natively, and the run says ports may vary.
fn on_host_network(sh: &mut Shared) -> Outcome {
    sh.warn(HOST_NETWORK_PORTS.into());
    Err(Refusal::Native)
}

/// bind(fd, addr, len): a port-0 bind of an inet socket gets an allocated port; others run natively.
pub(crate) fn bind<G: Guest>(sh: &mut Shared, g: &mut G, fd: i32, addr: u64, len: u32) -> Outcome {
    let len = len as usize;
    if !(2..=std::mem::size_of::<libc::sockaddr_storage>()).contains(&len) {
        return Err(Refusal::Native);
    }
    // An unreadable address: the kernel gives the guest its EFAULT.
    let Ok(a) = g.read_bytes(addr, len) else { return Err(Refusal::Native) };
    let family = family_of(&a);
    if port_offset(family).is_none() || len < min_len(family) || !(PortUse::Bind { port: port_of(&a) }).needs_port() {
        return Err(Refusal::Native);
    }
    if sh.host_network {
        return on_host_network(sh);
    }
    bind_allocated(sh, g, fd, a)
}

/// connect(fd, addr, ..) and listen(fd, ..) (`addr` 0): an inet socket without a port is first bound to an
/// allocated one (on the unspecified address, as the kernel's implicit bind); then the call runs natively.
pub(crate) fn implicit<G: Guest>(sh: &mut Shared, g: &mut G, fd: i32, addr: u64) -> Outcome {
    if addr != 0 {
        // Only a connect to an inet address binds implicitly (not AF_UNSPEC, the disconnect of a datagram socket).
        let Ok(a) = g.read_bytes(addr, 2) else { return Err(Refusal::Native) };
        if port_offset(family_of(&a)).is_none() {
            return Err(Refusal::Native);
        }
    }
    let Ok(sock) = g.borrow_fd(fd) else { return Err(Refusal::Native) };
    // Not a socket, or closed: the native call reports it.
    let Ok(own) = net::getsockname(&sock) else { return Err(Refusal::Native) };
    let family = family_of(&own);
    if port_offset(family).is_none()
        || own.len() < min_len(family)
        || !(PortUse::Implicit { own_port: port_of(&own) }).needs_port()
        || !unspecified(&own)
    {
        return Err(Refusal::Native);
    }
    if sh.host_network {
        return on_host_network(sh);
    }
    match bind_allocated(sh, g, fd, own) {
        Ok(_) => Err(Refusal::Native),
        // A socket type that cannot bind (a raw socket...): the call runs as the kernel has it.
        Err(Refusal::Errno(libc::EINVAL | libc::EOPNOTSUPP)) => Err(Refusal::Native),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;

    use super::*;
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::shared;
    use crate::reply::Reply;

    fn sockaddr_in(port: u16) -> Vec<u8> {
        let mut a = vec![0u8; 16];
        a[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&port.to_be_bytes());
        a[4..8].copy_from_slice(&[127, 0, 0, 1]);
        a
    }

    fn tcp() -> OwnedFd {
        net::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap()
    }

    fn bound_port(fd: &OwnedFd) -> u16 {
        port_of(&net::getsockname(fd).unwrap())
    }

    #[test]
    fn port_zero_gets_the_seeded_sequence() {
        let mut ports = Vec::new();
        for seed in [1, 1, 2] {
            let mut sh = shared(seed, 1000);
            let mut g = FakeGuest::new(3);
            g.fds.insert(5, tcp());
            g.put(0x100, &sockaddr_in(0));
            let r = dispatch(&mut sh, &mut g, libc::SYS_bind, decode(libc::SYS_bind, [5, 0x100, 16, 0, 0, 0]));
            assert!(matches!(r, Reply::Value(0)), "{r:?}");
            let port = bound_port(&g.fds[&5]);
            let mut expected = repro_detcore::ports::PortAllocator::new(seed);
            // The first port of the sequence, unless the host happened to use it.
            assert!((0..BIND_ATTEMPTS).any(|_| expected.next_port() == port));
            ports.push(port);
        }
        assert_ne!(ports[0], ports[2], "another seed, another port");
    }

    #[test]
    fn explicit_ports_and_other_families_run_natively() {
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(3);
        g.fds.insert(5, tcp());
        g.put(0x100, &sockaddr_in(8080)).put(0x200, &[1, 0, b'/', 0]);
        let nr = libc::SYS_bind;
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [5, 0x100, 16, 0, 0, 0])), Reply::Continue));
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [5, 0x200, 4, 0, 0, 0])), Reply::Continue));
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [5, 0x100, 8, 0, 0, 0])), Reply::Continue));
        sh.host_network = true;
        g.put(0x300, &sockaddr_in(0));
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [5, 0x300, 16, 0, 0, 0])), Reply::Continue));
        assert!(sh.stats.warnings.contains(HOST_NETWORK_PORTS));
    }

    #[test]
    fn connect_and_listen_bind_an_unbound_socket_first() {
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(3);
        g.fds.insert(5, tcp());
        g.fds.insert(6, tcp());
        g.put(0x100, &sockaddr_in(1));
        let r = dispatch(&mut sh, &mut g, libc::SYS_listen, decode(libc::SYS_listen, [5, 1, 0, 0, 0, 0]));
        assert!(matches!(r, Reply::Continue), "{r:?}");
        let first = bound_port(&g.fds[&5]);
        assert!(first >= repro_detcore::ports::EPHEMERAL_FIRST);
        let r = dispatch(&mut sh, &mut g, libc::SYS_connect, decode(libc::SYS_connect, [6, 0x100, 16, 0, 0, 0]));
        assert!(matches!(r, Reply::Continue), "{r:?}");
        let second = bound_port(&g.fds[&6]);
        assert!(second >= repro_detcore::ports::EPHEMERAL_FIRST && second != first);
        // A bound socket is left alone.
        let r = dispatch(&mut sh, &mut g, libc::SYS_listen, decode(libc::SYS_listen, [5, 1, 0, 0, 0, 0]));
        assert!(matches!(r, Reply::Continue));
        assert_eq!(bound_port(&g.fds[&5]), first);
    }
}
