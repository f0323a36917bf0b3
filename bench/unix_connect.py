# The per-connect cost of the host-socket guard (docs/benchmarks.md, issue 44): run inside the guest,
# `repro run [--no-supervisor] -- python3 bench/unix_connect.py N`; prints µs per connect+accept+close to a
# socket in /tmp and per connect to a missing path.
import socket, time, sys, os
n = int(sys.argv[1])
p = "/tmp/b.sock"
s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(16)
t = time.perf_counter()
for _ in range(n):
    c = socket.socket(socket.AF_UNIX); c.connect(p); a, _ = s.accept(); a.close(); c.close()
t1 = time.perf_counter()
for _ in range(n):
    c = socket.socket(socket.AF_UNIX)
    try: c.connect("/tmp/missing.sock")
    except OSError: pass
    c.close()
t2 = time.perf_counter()
print("connect+accept %.1f us, missing %.1f us" % ((t1-t)/n*1e6, (t2-t1)/n*1e6))
