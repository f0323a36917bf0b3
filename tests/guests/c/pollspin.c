// An event loop polls with a zero timeout (poll, epoll_wait) until a worker thread has set a flag: natively the
// worker runs beside it; under the scheduler a zero-timeout poll is a scheduling point, so the worker runs
// (before, the loop kept it from running until the spin-loop watchdog preempted the loop: exit 121).
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/epoll.h>

static atomic_int flag;

static void *worker(void *arg) {
    (void)arg;
    atomic_store_explicit(&flag, 1, memory_order_release);
    return NULL;
}

int main(void) {
    int ep = epoll_create1(0);
    struct epoll_event ev;
    pthread_t t;
    for (int round = 0; round < 2; round++) {
        atomic_store(&flag, 0);
        pthread_create(&t, NULL, worker, NULL);
        while (!atomic_load_explicit(&flag, memory_order_acquire)) {
            if (round == 0) {
                poll(NULL, 0, 0);
            } else {
                epoll_wait(ep, &ev, 1, 0);
            }
        }
        pthread_join(t, NULL);
        printf("round %d: the worker ran\n", round);
    }
    return 0;
}
