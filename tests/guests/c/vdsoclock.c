// Reads the clock 1,000,000 times through libc (the vDSO) and prints the first and last values and a
// checksum of all of them, plus whether the reads went through the vDSO.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/auxv.h>
#include <sys/time.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    struct timespec first, t;
    unsigned long long sum = 0;
    clock_gettime(CLOCK_REALTIME, &first);
    for (long i = 0; i < n; i++) {
        clock_gettime(i % 2 ? CLOCK_MONOTONIC : CLOCK_REALTIME, &t);
        sum = sum * 31 + (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    printf("vdso %s\n", getauxval(AT_SYSINFO_EHDR) ? "present" : "absent");
    printf("first %lld.%09ld\n", (long long)first.tv_sec, first.tv_nsec);
    printf("last %lld.%09ld\n", (long long)t.tv_sec, t.tv_nsec);
    printf("gettimeofday %lld.%06ld\n", (long long)tv.tv_sec, (long)tv.tv_usec);
    printf("time %lld\n", (long long)time(NULL));
    printf("sum %llx\n", sum);
    return 0;
}
