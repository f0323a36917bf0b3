# A thread pool whose workers make system calls that release the GIL (stat) while the others wait for it; printed:
# the order in which they finished. It follows how the threads interleave, and nothing else.
import os
from concurrent.futures import ThreadPoolExecutor, wait

done = []


def work(i):
    for _ in range(20):
        os.stat(".")
    done.append(i)


with ThreadPoolExecutor(max_workers=4) as pool:
    wait([pool.submit(work, i) for i in range(6)])
print(done)
