# A thread pool: eight tasks of two sizes, printed in the order they complete.
from concurrent.futures import ThreadPoolExecutor, as_completed


def work(i):
    s = 0
    for k in range(20000 * (1 + i % 3)):
        s += k
    return i


with ThreadPoolExecutor(4) as ex:
    futures = [ex.submit(work, i) for i in range(8)]
    print(" ".join(str(f.result()) for f in as_completed(futures)))
