// A Go-like vDSO user: finds the vDSO through AT_SYSINFO_EHDR and resolves __vdso_clock_gettime and
// __vdso_gettimeofday itself, the way Go's runtime (and musl) do it: PT_DYNAMIC found by file offset,
// DT_HASH lookup, versioned symbols (LINUX_2.6). Built static. Prints what it read.
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/time.h>
#include <time.h>

static unsigned long base, load_offset;
static const Elf64_Sym *syms;
static const char *strs;
static const Elf32_Word *hash;
static const Elf64_Versym *versym;
static const Elf64_Verdef *verdef;

static unsigned long elf_hash(const char *name) {
    unsigned long h = 0, g;
    for (; *name; name++) {
        h = (h << 4) + (unsigned char)*name;
        if ((g = h & 0xf0000000)) h ^= g >> 24;
        h &= ~g;
    }
    return h;
}

static int version_matches(int i, const char *want) {
    if (!versym) return 1;
    Elf64_Versym v = versym[i] & 0x7fff;
    for (const Elf64_Verdef *d = verdef;; d = (const Elf64_Verdef *)((const char *)d + d->vd_next)) {
        if (!(d->vd_flags & VER_FLG_BASE) && (d->vd_ndx & 0x7fff) == v) {
            const Elf64_Verdaux *aux = (const Elf64_Verdaux *)((const char *)d + d->vd_aux);
            return strcmp(strs + aux->vda_name, want) == 0;
        }
        if (!d->vd_next) return 0;
    }
}

static void *lookup(const char *name) {
    Elf32_Word nbucket = hash[0];
    const Elf32_Word *bucket = hash + 2, *chain = bucket + nbucket;
    for (Elf32_Word i = bucket[elf_hash(name) % nbucket]; i; i = chain[i]) {
        const Elf64_Sym *s = &syms[i];
        if (ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_shndx == SHN_UNDEF) continue;
        if (strcmp(strs + s->st_name, name) == 0 && version_matches(i, "LINUX_2.6"))
            return (void *)(load_offset + s->st_value);
    }
    return NULL;
}

int main(void) {
    base = getauxval(AT_SYSINFO_EHDR);
    if (!base) { printf("no vdso\n"); return 0; }
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
    const Elf64_Dyn *dyn = NULL;
    int found_load = 0;
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && !found_load) { found_load = 1; load_offset = base + ph[i].p_offset - ph[i].p_vaddr; }
        if (ph[i].p_type == PT_DYNAMIC) dyn = (const Elf64_Dyn *)(base + ph[i].p_offset);
    }
    if (!found_load || !dyn) { printf("bad vdso\n"); return 1; }
    for (; dyn->d_tag != DT_NULL; dyn++) {
        void *p = (void *)(load_offset + dyn->d_un.d_ptr);
        switch (dyn->d_tag) {
        case DT_STRTAB: strs = p; break;
        case DT_SYMTAB: syms = p; break;
        case DT_HASH: hash = p; break;
        case DT_VERSYM: versym = p; break;
        case DT_VERDEF: verdef = p; break;
        }
    }
    if (!strs || !syms || !hash) { printf("vdso without DT_HASH\n"); return 1; }
    int (*cg)(clockid_t, struct timespec *) = lookup("__vdso_clock_gettime");
    int (*gtod)(struct timeval *, void *) = lookup("__vdso_gettimeofday");
    if (!cg || !gtod) { printf("symbols not found\n"); return 1; }
    struct timespec a, b;
    struct timeval tv;
    cg(CLOCK_REALTIME, &a);
    cg(CLOCK_MONOTONIC, &b);
    gtod(&tv, NULL);
    printf("vdso realtime %lld.%09ld\n", (long long)a.tv_sec, a.tv_nsec);
    printf("vdso monotonic %lld.%09ld\n", (long long)b.tv_sec, b.tv_nsec);
    printf("vdso gettimeofday %lld.%06ld\n", (long long)tv.tv_sec, (long)tv.tv_usec);
    return 0;
}
