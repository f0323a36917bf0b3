// A thread computes for about 0.4 s without a system call while another thread is ready to run: not a
// spin loop, and deterministic under the scheduler as long as the spin-loop limit is longer than the computation.
#include <pthread.h>
#include <stdio.h>

static volatile unsigned long sink;

static void *compute(void *arg) {
    (void)arg;
    unsigned long s = 0;
    for (unsigned long i = 0; i < 400000000UL; i++) {
        s += i ^ (s >> 3);
        sink = s;
    }
    printf("computed %lu\n", s);
    return NULL;
}

static void *other(void *arg) {
    (void)arg;
    printf("other ran\n");
    return NULL;
}

int main(void) {
    pthread_t a, b;
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_create(&a, NULL, compute, NULL);
    pthread_create(&b, NULL, other, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
