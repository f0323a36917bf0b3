// Four threads each write(1, ...) their digit three times, with no lock: the program assumes each thread's digits
// come out together ("000111222333" in some order of the threads). The bug shows (exit 1) when another thread's
// write comes between two of one thread's.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#define N 4
#define EACH 3
static atomic_int pos;
static int seen[N * EACH];

static void *work(void *arg) {
    long id = (long)arg;
    char c = (char)('0' + id);
    for (int i = 0; i < EACH; i++) {
        if (write(1, &c, 1) != 1) return NULL;
        seen[atomic_fetch_add(&pos, 1)] = (int)id;
    }
    return NULL;
}

int main(void) {
    pthread_t t[N];
    for (long i = 0; i < N; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    if (write(1, "\n", 1) != 1) return 2;
    for (int i = 0; i < N * EACH; i += EACH)
        for (int j = 1; j < EACH; j++)
            if (seen[i + j] != seen[i]) return 1;
    return 0;
}
