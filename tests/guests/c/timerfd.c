// A timerfd in logical time: every 100 ms from 250 ms, read blocking, then through epoll with a timeout. With
// the argument "prof" it also arms ITIMER_PROF, which counts the host's CPU time: not mediated, the run must
// say so.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int fd = timerfd_create(CLOCK_MONOTONIC, 0);
    if (fd < 0) {
        perror("timerfd_create");
        return 1;
    }
    struct itimerspec its = {.it_interval = {0, 100000000}, .it_value = {0, 250000000}};
    double t0 = now();
    if (timerfd_settime(fd, 0, &its, NULL) < 0) {
        perror("timerfd_settime");
        return 1;
    }
    uint64_t n = 0;
    if (read(fd, &n, 8) != 8) {
        perror("read");
        return 1;
    }
    printf("first expiry after %.2f s: %llu\n", now() - t0, (unsigned long long)n);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    uint64_t total = 0;
    while (total < 5) {
        struct epoll_event out;
        if (epoll_wait(ep, &out, 1, 1000) == 1 && read(fd, &n, 8) == 8)
            total += n;
    }
    printf("5 more after %.2f s\n", now() - t0);
    if (argc > 1 && strcmp(argv[1], "prof") == 0) {
        struct itimerval prof = {.it_value = {30, 0}};
        setitimer(ITIMER_PROF, &prof, NULL);
    }
    printf("timerfd ok\n");
    return 0;
}
