/* LD_PRELOAD shim: make the libraries named in AVX2ONLY_MAP see a CPU without AVX-512.
 *
 * ONNX Runtime's MLAS and OpenVINO's CPU plugin pick their kernels from `cpuid` at run time and
 * have no setting to cap the instruction set. patch_cpuid.py writes copies of those libraries in
 * which every `cpuid` (0F A2) is `int3; nop` (CC 90); this shim
 *   - redirects dlopen of such a library (matched by file name) to its patched copy, and
 *   - answers the resulting SIGTRAP by running the real `cpuid` with AVX-512, AVX512-BF16/FP16,
 *     AMX and AVX-VNNI cleared, as an AVX2-only CPU (Haswell..Zen 3) would report.
 * AVX2ONLY_MAP="name1=/path/copy1:name2=/path/copy2"; AVX2ONLY_VERBOSE=1 reports at exit.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

static unsigned long traps;
static unsigned long redirects;

static void on_trap(int sig, siginfo_t *info, void *raw) {
    (void)info;
    ucontext_t *uc = raw;
    greg_t *g = uc->uc_mcontext.gregs;
    unsigned char *ip = (unsigned char *)g[REG_RIP];
    if (ip[-1] != 0xCC || ip[0] != 0x90) { /* not a patched cpuid: behave as without us */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    unsigned leaf = (unsigned)g[REG_RAX], sub = (unsigned)g[REG_RCX], a, b, c, d;
    __cpuid_count(leaf, sub, a, b, c, d);
    if (leaf == 7 && sub == 0) {
        b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
        c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25));
    } else if (leaf == 7 && sub == 1) {
        a &= ~((1u << 4) | (1u << 5) | (1u << 21) | (1u << 23));
    }
    g[REG_RAX] = a;
    g[REG_RBX] = b;
    g[REG_RCX] = c;
    g[REG_RDX] = d;
    g[REG_RIP] = (greg_t)(ip + 1); /* past the nop */
    __atomic_add_fetch(&traps, 1, __ATOMIC_RELAXED);
}

static void report(void) {
    if (getenv("AVX2ONLY_VERBOSE"))
        fprintf(stderr, "avx2only: %lu dlopen redirects, %lu cpuid answered\n", redirects, traps);
}

__attribute__((constructor)) static void setup(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTRAP, &sa, NULL);
    atexit(report);
}

static const char *redirect(const char *file, char *buf, size_t size) {
    const char *map = getenv("AVX2ONLY_MAP");
    if (!file || !map) return file;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    const char *p = map;
    while (*p) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq && (size_t)(eq - p) == strlen(base) && strncmp(p, base, (size_t)(eq - p)) == 0) {
            size_t n = len - (size_t)(eq - p) - 1;
            if (n < size) {
                memcpy(buf, eq + 1, n);
                buf[n] = 0;
                __atomic_add_fetch(&redirects, 1, __ATOMIC_RELAXED);
                return buf;
            }
        }
        if (!end) break;
        p = end + 1;
    }
    return file;
}

void *dlopen(const char *file, int mode) {
    static void *(*real)(const char *, int);
    if (!real) real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
    char buf[4096];
    return real(redirect(file, buf, sizeof buf), mode);
}
