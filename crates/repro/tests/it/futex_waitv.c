#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint32_t a = 1, b = 2;

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* futex_waitv on a and b with an absolute timeout `secs` from now on clock `c`. */
static long waitv(clockid_t c, long secs) {
    struct futex_waitv w[2] = {
        {.val = 1, .uaddr = (uintptr_t)&a, .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG},
        {.val = 2, .uaddr = (uintptr_t)&b, .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG},
    };
    struct timespec ts;
    clock_gettime(c, &ts);
    ts.tv_sec += secs;
    return syscall(SYS_futex_waitv, w, 2, 0, &ts, c);
}

static void *waker(void *arg) {
    (void)arg;
    struct timespec d = {1, 0};
    nanosleep(&d, NULL);
    __atomic_store_n(&b, 5, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &b, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    return NULL;
}

int main(void) {
    double t0 = now(CLOCK_MONOTONIC);
    long r = waitv(CLOCK_MONOTONIC, 200);
    printf("monotonic: %ld %s after %.1f s\n", r, r < 0 ? strerror(errno) : "woken", now(CLOCK_MONOTONIC) - t0);
    t0 = now(CLOCK_MONOTONIC);
    r = waitv(CLOCK_REALTIME, 100);
    printf("realtime: %ld %s after %.1f s\n", r, r < 0 ? strerror(errno) : "woken", now(CLOCK_MONOTONIC) - t0);
    /* A thread changes b after a second and wakes it: the wait ends then (woken, or EAGAIN if the word changed
       before the wait reached the kernel), long before its timeout. */
    pthread_t th;
    pthread_create(&th, NULL, waker, NULL);
    t0 = now(CLOCK_MONOTONIC);
    r = waitv(CLOCK_MONOTONIC, 200);
    int e = errno;
    pthread_join(th, NULL);
    printf("woken: %s, b=%u after %.1f s\n", r == 1 || (r < 0 && e == EAGAIN) ? "yes" : strerror(e), b,
           now(CLOCK_MONOTONIC) - t0);
    return 0;
}
