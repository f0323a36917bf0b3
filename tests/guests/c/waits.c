// Timed waits that nothing can end (the clock jumps to their deadline, no wall-clock wait), and a
// poll on a pipe another guest process writes to (must not be cut short). Prints logical elapsed ms.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct timespec t0;
static void start(void) { clock_gettime(CLOCK_MONOTONIC, &t0); }
static long ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec)) / 1000000;
}

int main(void) {
    int p[2];
    if (pipe(p)) return 2;
    struct pollfd pf = {p[0], POLLIN, 0};
    start();
    int r = poll(&pf, 1, 5000);
    printf("poll %d revents %d after %ld ms\n", r, pf.revents, ms());

    struct timespec ts = {1, 500000000};
    start();
    r = ppoll(&pf, 1, &ts, NULL);
    printf("ppoll %d after %ld ms\n", r, ms());

    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(p[0], &rs);
    struct timeval tv = {2, 500000};
    start();
    r = select(p[0] + 1, &rs, NULL, NULL, &tv);
    printf("select %d set %d after %ld ms\n", r, FD_ISSET(p[0], &rs), ms());

    FD_SET(p[0], &rs);
    ts = (struct timespec){0, 250000000};
    start();
    r = pselect(p[0] + 1, &rs, NULL, NULL, &ts, NULL);
    printf("pselect %d after %ld ms\n", r, ms());

    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = p[0]};
    epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev);
    start();
    r = epoll_wait(ep, &ev, 1, 3000);
    printf("epoll_wait %d after %ld ms\n", r, ms());

    uint32_t word = 0;
    ts = (struct timespec){1, 0};
    start();
    long f = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
    printf("futex %ld %s after %ld ms\n", f, f < 0 && errno == ETIMEDOUT ? "ETIMEDOUT" : "?", ms());

    // A socket can be made ready from outside the guest (the network): its wait is never jumped; it
    // runs natively (200 ms of real time) and the logical clock does not move for it.
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 2;
    struct pollfd sf = {sv[0], POLLIN, 0};
    start();
    r = poll(&sf, 1, 200);
    printf("socket poll %d after %ld ms\n", r, ms());

    // Ready descriptors are not waited for, and their revents are reported.
    if (write(p[1], "x", 1) != 1) return 2;
    start();
    r = poll(&pf, 1, 5000);
    printf("ready poll %d revents %d after %ld ms\n", r, pf.revents, ms());
    char c;
    if (read(p[0], &c, 1) != 1) return 2;

    // A pipe another guest process writes to after some work: the wait ends with its data.
    int q[2];
    if (pipe(q)) return 2;
    pid_t child = fork();
    if (child == 0) {
        close(q[0]);
        volatile unsigned long x = 0;
        for (unsigned long i = 0; i < 50000000UL; i++) x += i;
        if (write(q[1], "y", 1) != 1) _exit(3);
        _exit(0);
    }
    close(q[1]);
    struct pollfd qf = {q[0], POLLIN, 0};
    start();
    r = poll(&qf, 1, 10000);
    long waited = ms();
    char d = '-';
    if (r == 1 && read(q[0], &d, 1) != 1) d = '?';
    printf("pipe poll %d data %c %s\n", r, d, waited < 10000 ? "before the timeout" : "timed out");
    int st;
    waitpid(child, &st, 0);
    return 0;
}
