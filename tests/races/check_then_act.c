// Check-then-act on a file: two threads each take a lock file when it does not exist yet (stat, then open with
// O_CREAT but without O_EXCL) and count themselves as its owner. The bug shows (exit 1) when both own it.
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOCK "check_then_act.lock"
static atomic_int owners;

static void *take(void *arg) {
    (void)arg;
    struct stat st;
    if (stat(LOCK, &st) != 0) {
        int fd = open(LOCK, O_CREAT | O_WRONLY, 0644);
        if (fd < 0) return NULL;
        atomic_fetch_add(&owners, 1);
        close(fd);
    }
    return NULL;
}

int main(void) {
    unlink(LOCK);
    pthread_t a, b;
    pthread_create(&a, NULL, take, NULL);
    pthread_create(&b, NULL, take, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    unlink(LOCK);
    printf("owners %d\n", owners);
    return owners == 1 ? 0 : 1;
}
