// Four threads do work in rounds, yielding between rounds, and note the order in which they finish: natively the
// kernel's preemption, the second CPU and the clock (each round's length follows it, so that the race is close
// even on a loaded machine) make the order vary; under repro the scheduler's seed decides it.
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define N 4
#define ROUNDS 50
static atomic_int next;
static int order[N];
static volatile unsigned long sink;

static void *work(void *arg) {
    long id = (long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned long acc = 0, n = 10000 + (unsigned long)ts.tv_nsec % 20000;
        for (unsigned long i = 0; i < n; i++) acc += i * (unsigned long)(id + 1);
        sink += acc;
        sched_yield();
    }
    order[atomic_fetch_add(&next, 1)] = (int)id;
    return NULL;
}

int main(void) {
    pthread_t t[N];
    for (long i = 0; i < N; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) printf("%d%c", order[i] + 1, i == N - 1 ? '\n' : ' ');
    return 0;
}
