// Small helpers Swift cannot express through the Glibc module (hidden or variadic
// declarations). Nothing here runs between fork and exec.
#include "ahl_util.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/socket.h>

int ahl_memfd(const char *name) { return memfd_create(name, MFD_CLOEXEC); }

int ahl_accept_cloexec(int listener) { return accept4(listener, NULL, NULL, SOCK_CLOEXEC); }
