// libcap: capability names and the running kernel's capability count.
#ifndef AUTOHARNESS_CCAP_SHIM_H
#define AUTOHARNESS_CCAP_SHIM_H
#include <sys/capability.h>
#endif
