// A lost update: two threads add to a shared counter three times each, reading it, logging a line (a write, a
// system call between the read and the store) and storing the sum. The bug shows (exit 1) when an update is lost.
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static volatile long counter;
static int log_fd;

static void *work(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++) {
        long v = counter;
        if (write(log_fd, "add\n", 4) != 4) return NULL;
        counter = v + 1;
    }
    return NULL;
}

int main(void) {
    log_fd = open("/dev/null", O_WRONLY);
    if (log_fd < 0) return 2;
    pthread_t a, b;
    pthread_create(&a, NULL, work, NULL);
    pthread_create(&b, NULL, work, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("counter %ld of 6\n", counter);
    return counter == 6 ? 0 : 1;
}
