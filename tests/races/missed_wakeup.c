// A missed condition-variable wakeup: the waiter reads the flag without the lock, logs a line, then waits; when the
// signal comes between the read and the wait it is lost, and the wait times out (1 s). The bug shows (exit 1)
// then. No sched_yield anywhere.
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static volatile int ready;

static void *signaler(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    ready = 1;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, signaler, NULL);
    int seen = ready; // the bug: read without the lock
    if (write(2, "", 0) != 0) return 2;
    int missed = 0;
    if (!seen) {
        pthread_mutex_lock(&m);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        missed = pthread_cond_timedwait(&c, &m, &ts) == ETIMEDOUT;
        pthread_mutex_unlock(&m);
    }
    pthread_join(t, NULL);
    printf("%s\n", missed ? "missed" : "woken");
    return missed;
}
