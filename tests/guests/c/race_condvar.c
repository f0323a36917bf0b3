// A condition variable's missed wakeup: the waiter reads the flag without the lock, then waits; when the signal
// comes between the read and the wait it is lost, and the wait times out (1 s).
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static volatile int ready;
static volatile unsigned long sink;

// Work of about the same length on both sides, so that natively either may come first.
static void busy(void) {
    for (unsigned long i = 0; i < 200000; i++) sink += i;
}

static void *signaler(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++) {
        busy();
        sched_yield();
    }
    pthread_mutex_lock(&m);
    ready = 1;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, signaler, NULL);
    busy();
    int seen = ready; // the bug: read without the lock
    for (int i = 0; i < 3; i++) {
        busy();
        sched_yield();
    }
    const char *what = "not needed";
    if (!seen) {
        pthread_mutex_lock(&m);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        int rc = pthread_cond_timedwait(&c, &m, &ts);
        pthread_mutex_unlock(&m);
        what = rc == ETIMEDOUT ? "missed" : "woken";
    }
    pthread_join(t, NULL);
    printf("wakeup %s\n", what);
    return 0;
}
