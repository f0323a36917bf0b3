// Prints everything a C program can read that would differ between runs: clocks through libc (the
// vDSO natively), the raw syscall, gettimeofday, time, rdtsc, getrandom, AT_RANDOM, pid, uname, nproc.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <x86intrin.h>

static void hex(const char *label, const unsigned char *b, size_t n) {
    printf("%s ", label);
    for (size_t i = 0; i < n; i++) printf("%02x", b[i]);
    printf("\n");
}

int main(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("libc realtime %lld.%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("libc monotonic %lld.%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
    clock_gettime(CLOCK_BOOTTIME, &ts);
    printf("libc boottime %lld.%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    printf("raw realtime %lld.%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    printf("gettimeofday %lld.%06ld\n", (long long)tv.tv_sec, (long)tv.tv_usec);
    printf("time %lld\n", (long long)time(NULL));
    printf("rdtsc %llu\n", (unsigned long long)__rdtsc());
    unsigned aux = 0xffffffff;
    /* Read the counter first: the order in which printf's arguments are evaluated is unspecified. */
    unsigned long long tscp = __rdtscp(&aux);
    printf("rdtscp %llu aux %u\n", tscp, aux);
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != sizeof r) return 3;
    hex("getrandom", r, sizeof r);
    hex("at_random", (const unsigned char *)getauxval(AT_RANDOM), 16);
    printf("vdso %s\n", getauxval(AT_SYSINFO_EHDR) ? "present" : "absent");
    printf("pid %d ppid %d\n", getpid(), getppid());
    struct utsname u;
    uname(&u);
    printf("uname %s %s %s %s %s\n", u.sysname, u.nodename, u.release, u.version, u.machine);
    printf("nproc %ld %d\n", sysconf(_SC_NPROCESSORS_ONLN), get_nprocs());
    struct sysinfo si;
    sysinfo(&si);
    printf("sysinfo uptime %ld ram %lu\n", si.uptime, si.totalram);
    const char *env = getenv("PROBE_SLEEP");
    struct timespec req = {env ? atoi(env) : 60, 0};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    nanosleep(&req, NULL);
    struct timespec ts2;
    clock_gettime(CLOCK_MONOTONIC, &ts2);
    printf("slept %lld s\n", (long long)(ts2.tv_sec - ts.tv_sec));
    return 0;
}
