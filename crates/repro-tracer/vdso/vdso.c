/* repro's replacement vDSO (x86_64). The supervisor maps this image into every new program image at
 * exec and points AT_SYSINFO_EHDR at it, so libc (glibc, musl), Go and static binaries find these
 * functions where they expect the kernel's vDSO.
 *
 * Clock reads are answered in-process from a data page shared with the supervisor (a memfd mapped
 * MAP_SHARED in every guest process and in the supervisor), placed in the page just below the image.
 * The page holds the logical clock: each read returns base + elapsed and advances `elapsed` by the clock
 * step with one atomic add, exactly as the supervisor's DeterminismController does for a mediated read.
 * Everything the page cannot answer (unknown or per-process CPU clocks, a disabled page, a frozen clock
 * polled STALL_READS times in a row) falls back to the real syscall, which the seccomp filter sends to
 * the supervisor. getrandom always makes the real syscall.
 *
 * Constraints: position independent with no dynamic relocations (nothing relocates a vDSO), no libc,
 * no writable data of its own. The layout of `struct repro_vvar` is mirrored in src/vdso.rs. */
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

struct repro_vvar {
    uint64_t magic;        /* 0: VVAR_MAGIC */
    uint64_t flags;        /* 8: bit 0: answer nothing here, make the syscall */
    uint64_t step_ns;      /* 16: logical ns each read advances the clock */
    int64_t realtime_sec;  /* 24: CLOCK_REALTIME at elapsed 0 */
    int64_t monotonic_sec; /* 32: CLOCK_MONOTONIC at elapsed 0 */
    uint64_t stall_reads;  /* 40: frozen-clock reads in a row before the supervisor must see them */
    uint64_t pad0[2];
    uint64_t elapsed_ns;   /* 64: logical ns since the run started (atomic) */
    uint64_t pad1[7];
    uint64_t reads;        /* 128: clock reads answered here (atomic) */
    uint64_t row_base;     /* 136: `reads` at the last mediated event (written by the supervisor) */
};

struct kernel_timespec { int64_t tv_sec; int64_t tv_nsec; };
struct kernel_timeval { int64_t tv_sec; int64_t tv_usec; };
struct kernel_timezone { int32_t tz_minuteswest; int32_t tz_dsttime; };

extern const char __ehdr_start[] __attribute__((visibility("hidden")));

static inline volatile struct repro_vvar *vvar(void) {
    /* The data page is the page below our ELF header. The empty asm hides the out-of-object pointer
     * arithmetic from the compiler's object-size checks. */
    uintptr_t p = (uintptr_t)__ehdr_start;
    __asm__("" : "+r"(p));
    return (volatile struct repro_vvar *)(p - 4096);
}

static inline long sys2(long nr, long a, long b) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b) : "rcx", "r11", "memory");
    return ret;
}

static inline long sys3(long nr, long a, long b, long c) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
}

#define SYS_gettimeofday 96
#define SYS_time 201
#define SYS_clock_gettime 228
#define SYS_clock_getres 229
#define SYS_getcpu 309
#define SYS_getrandom 318

enum kind { REALTIME, MONOTONIC, CPUTIME, OTHER };

static inline enum kind classify(int id) {
    switch (id) {
    case 0: case 5: case 8: case 11: return REALTIME;
    case 1: case 4: case 6: case 7: case 9: return MONOTONIC;
    case 2: case 3: return CPUTIME;
    default: return OTHER; /* per-pid CPU clocks, dynamic clocks, invalid ids: the supervisor decides */
    }
}

/* One logical clock read; 0 on success, -1 when the syscall must answer instead. */
static inline int logical_read(enum kind k, int64_t *sec, int64_t *nsec) {
    volatile struct repro_vvar *v = vvar();
    if (v->flags & 1) return -1;
    uint64_t step = v->step_ns;
    if (step == 0) {
        /* A frozen clock polled in a loop never moves: let the supervisor see the last read so it can
         * stop the guest with an explanation. */
        uint64_t row = __atomic_load_n(&v->reads, __ATOMIC_RELAXED) - v->row_base;
        if (row + 1 >= v->stall_reads) return -1;
    }
    __atomic_fetch_add(&v->reads, 1, __ATOMIC_RELAXED);
    uint64_t e = __atomic_fetch_add(&v->elapsed_ns, step, __ATOMIC_SEQ_CST);
    int64_t base = k == REALTIME ? v->realtime_sec : k == MONOTONIC ? v->monotonic_sec : 0;
    *sec = base + (int64_t)(e / 1000000000u);
    *nsec = (int64_t)(e % 1000000000u);
    return 0;
}

EXPORT int __vdso_clock_gettime(int id, struct kernel_timespec *ts) {
    enum kind k = classify(id);
    int64_t s, n;
    if (k == OTHER || logical_read(k, &s, &n) != 0) return (int)sys2(SYS_clock_gettime, id, (long)ts);
    ts->tv_sec = s;
    ts->tv_nsec = n;
    return 0;
}

EXPORT int __vdso_gettimeofday(struct kernel_timeval *tv, struct kernel_timezone *tz) {
    if (tv) {
        int64_t s, n;
        if (logical_read(REALTIME, &s, &n) != 0) return (int)sys2(SYS_gettimeofday, (long)tv, (long)tz);
        tv->tv_sec = s;
        tv->tv_usec = n / 1000;
    }
    if (tz) {
        tz->tz_minuteswest = 0;
        tz->tz_dsttime = 0;
    }
    return 0;
}

EXPORT long __vdso_time(long *t) {
    int64_t s, n;
    if (logical_read(REALTIME, &s, &n) != 0) return sys2(SYS_time, (long)t, 0);
    if (t) *t = s;
    return s;
}

/* The pinned resolution the supervisor also answers for the syscall: 1 ns, the coarse clocks 4 ms. */
EXPORT int __vdso_clock_getres(int id, struct kernel_timespec *res) {
    enum kind k = classify(id);
    if (k == OTHER || (vvar()->flags & 1)) return (int)sys2(SYS_clock_getres, id, (long)res);
    if (res) {
        res->tv_sec = 0;
        res->tv_nsec = (id == 5 || id == 6) ? 4000000 : 1;
    }
    return 0;
}

EXPORT long __vdso_getcpu(unsigned *cpu, unsigned *node, void *cache) {
    (void)cache;
    if (cpu) *cpu = 0;
    if (node) *node = 0;
    return 0;
}

/* Linux >= 6.11 exports a vDSO getrandom that C libraries use with a per-thread state. Ours never
 * generates bytes itself: the parameter query fails (so libc keeps using the syscall) and every call is
 * the real getrandom syscall, which the supervisor answers from the seeded stream. */
EXPORT long __vdso_getrandom(void *buf, size_t len, unsigned flags, void *state, size_t state_len) {
    (void)state;
    if (state_len == ~(size_t)0 && !buf && !len && !flags) return -38; /* -ENOSYS */
    return sys3(SYS_getrandom, (long)buf, (long)len, (long)flags);
}

int clock_gettime(int, struct kernel_timespec *) __attribute__((weak, alias("__vdso_clock_gettime"), visibility("default")));
int gettimeofday(struct kernel_timeval *, struct kernel_timezone *) __attribute__((weak, alias("__vdso_gettimeofday"), visibility("default")));
long time(long *) __attribute__((weak, alias("__vdso_time"), visibility("default")));
int clock_getres(int, struct kernel_timespec *) __attribute__((weak, alias("__vdso_clock_getres"), visibility("default")));
long getcpu(unsigned *, unsigned *, void *) __attribute__((weak, alias("__vdso_getcpu"), visibility("default")));
long getrandom(void *, size_t, unsigned, void *, size_t) __attribute__((weak, alias("__vdso_getrandom"), visibility("default")));
