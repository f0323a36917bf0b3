// Waits for the clock to move by polling it: never ends under a frozen clock.
#include <stdio.h>
#include <time.h>
int main(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do { clock_gettime(CLOCK_MONOTONIC, &b); } while (b.tv_sec - a.tv_sec < 1);
    printf("one second passed\n");
    return 0;
}
