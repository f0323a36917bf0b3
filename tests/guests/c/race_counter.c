// A lock-free counter data race: two threads increment a shared counter without atomics, with a system call
// between the read and the write now and then; updates are lost as the threads interleave.
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

#define LOOPS 200000
static volatile long counter;

static void *work(void *arg) {
    long every = 1000 + 337 * (long)arg;
    for (long i = 0; i < LOOPS; i++) {
        long v = counter;
        if (i % every == 0) sched_yield();
        counter = v + 1;
        if (i % 777 == 0) sched_yield();
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, work, (void *)0);
    pthread_create(&b, NULL, work, (void *)1);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("counter %ld of %d\n", counter, 2 * LOOPS);
    return 0;
}
