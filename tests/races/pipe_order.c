// Two producers write a message each into one pipe; the consumer assumes the first producer's ("A", started
// first) comes first. The bug shows (exit 1) when "B" comes first.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static int fds[2];

static void *produce(void *arg) {
    if (write(fds[1], (const char *)arg, 1) != 1) return NULL;
    return NULL;
}

int main(void) {
    if (pipe(fds) != 0) return 2;
    pthread_t a, b;
    pthread_create(&a, NULL, produce, "A");
    pthread_create(&b, NULL, produce, "B");
    char got[2];
    for (int i = 0; i < 2; i++)
        if (read(fds[0], &got[i], 1) != 1) return 2;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("%c%c\n", got[0], got[1]);
    return got[0] == 'A' ? 0 : 1;
}
