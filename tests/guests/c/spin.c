// A thread spins on an atomic flag without a system call until another thread sets it.
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_int flag;

static void *spinner(void *arg) {
    (void)arg;
    while (!atomic_load_explicit(&flag, memory_order_acquire)) {
    }
    return NULL;
}

static void *setter(void *arg) {
    (void)arg;
    sched_yield();
    atomic_store_explicit(&flag, 1, memory_order_release);
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, spinner, NULL);
    pthread_create(&b, NULL, setter, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("flag seen\n");
    return 0;
}
