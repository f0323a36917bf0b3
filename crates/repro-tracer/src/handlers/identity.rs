//! Identity: uname, sysinfo, the CPUs the guest sees (sched_getaffinity, getcpu).

use crate::decode::Syscall;
use crate::guest::Guest;
use crate::reply::{Outcome, Refusal};
use crate::state::Shared;

pub(crate) fn handle<G: Guest>(sh: &mut Shared, g: &mut G, call: Syscall) -> Outcome {
    match call {
        Syscall::Uname { buf } => {
            let b = sh.ctl.uname();
            g.write_bytes(buf, &b)?;
            Ok(0)
        }
        Syscall::Sysinfo { info } => {
            let b = sh.ctl.sysinfo();
            g.write_bytes(info, &b)?;
            Ok(0)
        }
        Syscall::SchedGetaffinity { len, mask } => {
            let m = sh.ctl.sched_getaffinity(len).map_err(|e| e.errno())?;
            g.write_bytes(mask, &m)?;
            Ok(m.len() as i64)
        }
        Syscall::Getcpu { cpu, node, .. } => {
            let (c, n) = sh.ctl.getcpu();
            // Both are written even when the first fails, as the kernel does; the first error is returned.
            let mut r = Ok(0);
            for (p, v) in [(cpu, c), (node, n)] {
                if p != 0 {
                    r = r.and(g.write_bytes(p, &v.to_le_bytes()).map(|_| 0));
                }
            }
            r.map_err(Refusal::from)
        }
        _ => Err(Refusal::Native),
    }
}

#[cfg(test)]
mod tests {
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::shared;
    use crate::reply::Reply;

    #[test]
    fn uname_is_pinned() {
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(3);
        g.map(0x1000, 6 * 65);
        let r = dispatch(&mut sh, &mut g, libc::SYS_uname, decode(libc::SYS_uname, [0x1000, 0, 0, 0, 0, 0]));
        assert!(matches!(r, Reply::Value(0)));
        let field = |i: usize| {
            let f = g.get(0x1000 + 65 * i as u64, 65);
            String::from_utf8(f[..f.iter().position(|&b| b == 0).unwrap()].to_vec()).unwrap()
        };
        assert_eq!(
            (field(0), field(1), field(2), field(4)),
            ("Linux".into(), "repro".into(), "6.1.0-repro".into(), "x86_64".into())
        );
    }

    #[test]
    fn the_guest_sees_its_cpus() {
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(3);
        g.map(0x1000, 128).put(0x2000, &[0xff; 8]);
        let nr = libc::SYS_sched_getaffinity;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0, 128, 0x1000, 0, 0, 0]));
        assert!(matches!(r, Reply::Value(8)));
        assert_eq!(g.get(0x1000, 8), [0b11, 0, 0, 0, 0, 0, 0, 0], "two CPUs");
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0, 12, 0x1000, 0, 0, 0]));
        assert!(matches!(r, Reply::Error(libc::EINVAL)));
        let r = dispatch(&mut sh, &mut g, libc::SYS_getcpu, decode(libc::SYS_getcpu, [0x2000, 0x2004, 0, 0, 0, 0]));
        assert!(matches!(r, Reply::Value(0)));
        assert_eq!(g.get(0x2000, 8), [0; 8], "CPU 0, node 0");
        assert_eq!(sh.stats.mediated["sched_getaffinity"], 2);
    }
}
