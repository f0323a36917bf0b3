# Prints what a Python program can read that would differ between runs.
import datetime
import os
import random
import socket
import sys
import time
import uuid

print("time", time.time(), time.time_ns())
print("monotonic", time.monotonic(), time.perf_counter())
print("datetime", datetime.datetime.now().isoformat(), datetime.datetime.now(datetime.timezone.utc).isoformat())
print("urandom", os.urandom(16).hex())
print("uuid4", uuid.uuid4())
print("random", random.random(), random.getrandbits(64))
print("hash", hash("repro"))
print("pid", os.getpid(), os.getppid())
print("hostname", socket.gethostname())
print("uname", os.uname())
print("cpus", os.cpu_count(), len(os.sched_getaffinity(0)))
for p in ["/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/random/uuid", "/proc/uptime", "/proc/loadavg"]:
    with open(p) as f:
        print(p, f.read().strip())
with open("/proc/cpuinfo") as f:
    print("cpuinfo processors", f.read().count("processor\t:"))
with open("/proc/meminfo") as f:
    print("meminfo", f.readline().strip())
if len(sys.argv) > 1:
    print("listdir", os.listdir(sys.argv[1]))
    print("scandir", [(e.name, e.inode()) for e in os.scandir(sys.argv[1])])
t0 = time.monotonic()
time.sleep(int(os.environ.get("PROBE_SLEEP", "60")))
print("slept", round(time.monotonic() - t0))
