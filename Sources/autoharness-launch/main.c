// autoharness-launch: the sandbox's monitor as a small executable of its own. The supervisor
// starts it with the launch plan on fd 3 (see ahl_spawn_exec); it is never run by hand.
//
// It has no C library: linked with -nostdlib, it starts at _start below. glibc's start-up
// (cpuid probing, one trap to the hypervisor per query on a virtual machine, and relocation
// of its IFUNCs) took 0.22 ms of every sandbox's critical path, more than the namespaces.
// CSandboxLaunch makes its system calls itself (sys.h, also for exiting and mapping pages
// here); what else it and the plan reader use, the string functions and an allocator, is
// here. Anything more fails the link.
#include <stddef.h>
#include <stdint.h>

#include "ahl_launch.h"

__attribute__((noreturn)) void ahl_start(long *sp);

#if defined(__x86_64__)
__asm__(".text\n.global _start\n.type _start,@function\n_start:\n"
        "  xor %ebp, %ebp\n"     // the outermost frame
        "  mov %rsp, %rdi\n"     // argc, argv, envp, auxv start here
        "  and $-16, %rsp\n"     // the ABI's call alignment
        "  call ahl_start\n"
        "  hlt\n");
#elif defined(__aarch64__)
__asm__(".text\n.global _start\n.type _start,%function\n_start:\n"
        "  mov x29, #0\n"
        "  mov x30, #0\n"
        "  mov x0, sp\n"
        "  bl ahl_start\n");
#else
#error "autoharness-launch: add this architecture's entry point"
#endif

void ahl_start(long *sp) {
    int argc = (int)sp[0];
    char **argv = (char **)(sp + 1);
    ahl_exit(ahl_launcher_main(argc, argv));  // returns only when it could not start
}

// --- what the compiler and CSandboxLaunch expect of a C library ---------------------------
// no_builtin: the optimiser must not turn these loops back into calls to themselves.
#define NO_BUILTIN __attribute__((no_builtin))

NO_BUILTIN void *memcpy(void *restrict d, const void *restrict s, size_t n) {
    unsigned char *dp = d;
    const unsigned char *sp = s;
    while (n--) *dp++ = *sp++;
    return d;
}

NO_BUILTIN void *memmove(void *d, const void *s, size_t n) {
    unsigned char *dp = d;
    const unsigned char *sp = s;
    if (dp < sp) {
        while (n--) *dp++ = *sp++;
    } else {
        while (n--) dp[n] = sp[n];
    }
    return d;
}

NO_BUILTIN void *memset(void *d, int c, size_t n) {
    unsigned char *dp = d;
    while (n--) *dp++ = (unsigned char)c;
    return d;
}

NO_BUILTIN int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = a, *y = b;
    for (; n; n--, x++, y++)
        if (*x != *y) return *x - *y;
    return 0;
}

NO_BUILTIN void *memchr(const void *s, int c, size_t n) {
    const unsigned char *p = s;
    for (; n; n--, p++)
        if (*p == (unsigned char)c) return (void *)p;
    return NULL;
}

NO_BUILTIN size_t strlen(const char *s) {
    const char *p = s;
    while (*p) p++;
    return (size_t)(p - s);
}

NO_BUILTIN char *strchr(const char *s, int c) {
    for (;; s++) {
        if (*s == (char)c) return (char *)s;
        if (!*s) return NULL;
    }
}

NO_BUILTIN char *strrchr(const char *s, int c) {
    const char *last = NULL;
    for (;; s++) {
        if (*s == (char)c) last = s;
        if (!*s) return (char *)last;
    }
}

NO_BUILTIN int strncmp(const char *a, const char *b, size_t n) {
    for (; n; n--, a++, b++) {
        if (*a != *b) return (unsigned char)*a - (unsigned char)*b;
        if (!*a) return 0;
    }
    return 0;
}

NO_BUILTIN int strcmp(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return (unsigned char)*a - (unsigned char)*b;
}

// The plan reader's few allocations (arrays sized by the plan), from pages mapped on demand and
// never returned: the launcher lives as long as its sandbox and allocates only at its start.
// Each block records its size so realloc can copy it (ahl_plan_pack shares the file, not used).
static unsigned char *arena;
static size_t arena_left;

void *malloc(size_t n) {
    size_t need = ((n + 15) & ~(size_t)15) + 16;
    if (need < n) return NULL;
    if (need > arena_left) {
        size_t chunk = need > (1u << 20) ? (need + 4095) & ~(size_t)4095 : (1u << 20);
        unsigned char *pages = ahl_map_pages(chunk);
        if (!pages) return NULL;
        arena = pages;
        arena_left = chunk;
    }
    unsigned char *block = arena;
    arena += need;
    arena_left -= need;
    *(size_t *)block = n;
    return block + 16;
}

void *calloc(size_t count, size_t size) {
    if (size && count > (size_t)-1 / size) return NULL;
    return malloc(count * size);  // fresh anonymous pages are zero
}

void *realloc(void *old, size_t n) {
    void *p = malloc(n);
    if (p && old) {
        size_t was = *(size_t *)((unsigned char *)old - 16);
        memcpy(p, old, was < n ? was : n);
    }
    return p;
}

void free(void *p) { (void)p; }
