// Uses a timerfd, which the supervisor cannot mediate: the run must say so.
#include <stdio.h>
#include <sys/timerfd.h>
int main(void) {
    int fd = timerfd_create(CLOCK_MONOTONIC, 0);
    printf("timerfd %s\n", fd >= 0 ? "ok" : "failed");
    return 0;
}
