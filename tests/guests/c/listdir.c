// Lists a directory with readdir (getdents64 underneath), in the order the kernel gives, with a
// tiny buffer as well (raw getdents64 with 64-byte reads) to check order does not depend on buffer size.
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
    DIR *d = opendir(argv[1]);
    if (!d) return 2;
    struct dirent *e;
    while ((e = readdir(d))) printf("readdir %s\n", e->d_name);
    closedir(d);
    int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
    char buf[64];
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            printf("small %s\n", buf + off + 19);
            off += reclen;
        }
    }
    return 0;
}
