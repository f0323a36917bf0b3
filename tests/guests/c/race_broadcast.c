/* Four threads wait on a condition with a timeout; main wakes them all at once (pthread_cond_broadcast). The
 * order in which they get going is the scheduler's (or the kernel's) to choose: each prints its number. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int go, waiting;

static void *waiter(void *arg) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 30;
    pthread_mutex_lock(&m);
    waiting++;
    while (!go)
        pthread_cond_timedwait(&c, &m, &deadline);
    pthread_mutex_unlock(&m);
    char line[8];
    int n = snprintf(line, sizeof line, "%ld ", (long)arg);
    write(1, line, n);
    return NULL;
}

int main(void) {
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, waiter, (void *)i);
    for (;;) {
        pthread_mutex_lock(&m);
        int all = waiting == 4;
        pthread_mutex_unlock(&m);
        if (all)
            break;
        usleep(1000);
    }
    pthread_mutex_lock(&m);
    go = 1;
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    write(1, "\n", 1);
    return 0;
}
