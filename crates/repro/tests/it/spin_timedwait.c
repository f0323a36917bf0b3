/* One thread spins (reading no clock) until the other's timed condition wait has reached its deadline; the
   waiter, as Java's AQS does, checks the clock after each wake-up and waits again until the deadline has come. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static atomic_int done;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c;

static double mono(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *waiter(void *arg) {
    (void)arg;
    struct timespec d;
    clock_gettime(CLOCK_MONOTONIC, &d);
    d.tv_sec += 1;
    pthread_mutex_lock(&m);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > d.tv_sec || (now.tv_sec == d.tv_sec && now.tv_nsec >= d.tv_nsec))
            break;
        pthread_cond_timedwait(&c, &m, &d);
    }
    pthread_mutex_unlock(&m);
    atomic_store(&done, 1);
    return NULL;
}

int main(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&c, &a);
    double t0 = mono();
    pthread_t th;
    pthread_create(&th, NULL, waiter, NULL);
    while (!atomic_load(&done))
        ;
    pthread_join(th, NULL);
    printf("waited %.1f s\n", mono() - t0);
    return 0;
}
