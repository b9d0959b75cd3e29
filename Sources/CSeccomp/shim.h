// libseccomp, plus the pieces of its API that Swift cannot import directly
// (function-like macros and variadic calls).
#ifndef AUTOHARNESS_CSECCOMP_SHIM_H
#define AUTOHARNESS_CSECCOMP_SHIM_H
#include <seccomp.h>
#include <errno.h>

static inline uint32_t ahs_act_allow(void) { return SCMP_ACT_ALLOW; }
static inline uint32_t ahs_act_notify(void) { return SCMP_ACT_NOTIFY; }
static inline uint32_t ahs_arch_native(void) { return SCMP_ARCH_NATIVE; }
static inline uint32_t ahs_arch_x86_64(void) { return SCMP_ARCH_X86_64; }
static inline uint32_t ahs_arch_x86(void) { return SCMP_ARCH_X86; }
static inline uint32_t ahs_arch_x32(void) { return SCMP_ARCH_X32; }

static inline struct scmp_arg_cmp ahs_arg(unsigned int arg, enum scmp_compare op,
                                          scmp_datum_t a, scmp_datum_t b) {
    struct scmp_arg_cmp c = { arg, op, a, b };
    return c;
}
#endif
