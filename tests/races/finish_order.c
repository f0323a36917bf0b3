// Four threads each compute for a different time, then take a mutex to note the order they finish in; none calls
// sched_yield. The program assumes the shortest computation finishes first (thread 3, then 2, 1, 0). The bug shows
// (exit 1) when the longest one (thread 0) is not last: it started long enough before the others.
#include <pthread.h>
#include <stdio.h>

#define N 4
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int order[N], done;
static volatile unsigned long sink;

static void *work(void *arg) {
    long id = (long)arg;
    for (unsigned long i = 0; i < 2000000UL * (unsigned long)(N - id); i++) sink += i;
    pthread_mutex_lock(&m);
    order[done++] = (int)id;
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(void) {
    pthread_t t[N];
    for (long i = 0; i < N; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) printf("%d%c", order[i], i == N - 1 ? '\n' : ' ');
    return order[N - 1] == 0 ? 0 : 1;
}
