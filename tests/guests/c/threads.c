// A small multithreaded program: threads compute, sleep and read the clock; the main thread joins them.
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#define N 4
static long results[N];

static void *work(void *arg) {
    long id = (long)arg, acc = 0;
    for (long i = 0; i < 200000; i++) acc += (i * (id + 1)) % 7;
    struct timespec req = {1, 0};
    nanosleep(&req, NULL);
    unsigned char b;
    getrandom(&b, 1, 0);
    results[id] = acc;
    return NULL;
}

int main(void) {
    pthread_t t[N];
    for (long i = 0; i < N; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) printf("thread %d result %ld\n", i, results[i]);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("done at %lld pid %d\n", (long long)ts.tv_sec, getpid());
    return 0;
}
