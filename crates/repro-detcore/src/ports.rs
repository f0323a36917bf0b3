//! Kernel-chosen ports: a bind to port 0 (and the implicit bind of a connect or listen on an unbound socket)
//! gets its port from a seeded sequence over the ephemeral range instead of the kernel's choice, which depends
//! on time and on what else ran.
//!
//! The sequence is a permutation of the range (an affine walk `start + k * stride mod size` with a stride
//! coprime to the size), so no port is offered twice before the whole range is used; a port the kernel refuses
//! (EADDRINUSE) is skipped by asking for the next one.

use crate::rng::SplitMix64;

/// The kernel's default ephemeral range (net.ipv4.ip_local_port_range), which the guest's own network namespace
/// starts with.
pub const EPHEMERAL_FIRST: u16 = 32768;
pub const EPHEMERAL_LAST: u16 = 60999;
/// How many ports one bind tries before it gives up with EADDRINUSE, as the kernel would with a full range.
pub const BIND_ATTEMPTS: usize = 64;

/// Domain separator of the port sequence (other seeded choices use other constants).
const DOMAIN_PORTS: u64 = 0x706f_7274_7321;

/// A deterministic allocator of ephemeral ports.
#[derive(Debug, Clone)]
pub struct PortAllocator {
    start: u64,
    stride: u64,
    next: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl PortAllocator {
    const SIZE: u64 = (EPHEMERAL_LAST - EPHEMERAL_FIRST) as u64 + 1;

    /// The allocator of a run with `seed`.
    pub fn new(seed: u64) -> PortAllocator {
        let mut r = SplitMix64::new(seed ^ DOMAIN_PORTS);
        let start = r.below(Self::SIZE);
        let mut stride = 1 + r.below(Self::SIZE - 1);
        while gcd(stride, Self::SIZE) != 1 {
            stride += 1;
        }
        PortAllocator { start, stride, next: 0 }
    }

    /// The next port of the sequence.
    pub fn next_port(&mut self) -> u16 {
        let k = self.next % Self::SIZE;
        self.next += 1;
        (EPHEMERAL_FIRST as u64 + (self.start + k * self.stride) % Self::SIZE) as u16
    }
}

/// What a bind-like call of the guest is, for the port policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortUse {
    /// bind(2) with this port in the address.
    Bind { port: u16 },
    /// connect(2) or listen(2) on a socket whose own port (getsockname) is this.
    Implicit { own_port: u16 },
}

impl PortUse {
    /// Whether the supervisor binds the socket to an allocated port first (a port the kernel would choose).
    pub fn needs_port(self) -> bool {
        match self {
            PortUse::Bind { port } => port == 0,
            PortUse::Implicit { own_port } => own_port == 0,
        }
    }
}

/// The warning a run on the host's network records: ports stay the kernel's.
pub const HOST_NETWORK_PORTS: &str =
    "the guest shares the host's network: ports it binds to 0 are the kernel's choice and may vary";

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_sequence_is_the_seeds_and_a_permutation() {
        let mut a = PortAllocator::new(1);
        let mut b = PortAllocator::new(1);
        let mut c = PortAllocator::new(2);
        let pa: Vec<u16> = (0..10).map(|_| a.next_port()).collect();
        let pb: Vec<u16> = (0..10).map(|_| b.next_port()).collect();
        let pc: Vec<u16> = (0..10).map(|_| c.next_port()).collect();
        assert_eq!(pa, pb);
        assert_ne!(pa, pc);
        let mut all = HashSet::new();
        let mut p = PortAllocator::new(7);
        for _ in 0..PortAllocator::SIZE {
            let port = p.next_port();
            assert!((EPHEMERAL_FIRST..=EPHEMERAL_LAST).contains(&port));
            assert!(all.insert(port), "port {port} offered twice");
        }
        assert_eq!(all.len() as u64, PortAllocator::SIZE);
    }

    #[test]
    fn only_port_zero_is_allocated() {
        assert!(PortUse::Bind { port: 0 }.needs_port());
        assert!(!PortUse::Bind { port: 8080 }.needs_port());
        assert!(PortUse::Implicit { own_port: 0 }.needs_port());
        assert!(!PortUse::Implicit { own_port: 40000 }.needs_port());
    }
}
