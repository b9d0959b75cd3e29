// `autoharness sandbox exec` handed to a launch service (`autoharness sandbox serve`) before the
// front's Swift runtime starts.
//
// A served launch leaves the front nothing to do but pass the launch on and wait: the Swift
// runtime's start (its images registered, its static initialisers) and a Swift client's type
// metadata and page faults in a 23 MB binary cost 0.4 ms of a 3.8 ms launch (measured with
// hyperfine, interleaved, against the same client called from main). This constructor runs
// first (priority 101: before the runtime's own constructors), with glibc's arguments. When the
// service runs the launch, the process ends here with its status; otherwise (no service, or it
// declined) it returns and the front starts as always, having changed nothing.
//
// Linked into autoharness-front alone (SwiftPM links a target's objects as they are, so the
// constructor is there without a reference).
#include "front_start.h"
#include "ahs_syscalls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/// This build's launch code (LaunchCodeDigestPlugin: a Swift function that only returns a
/// static string's address, callable before the runtime starts).
extern const unsigned char *ahl_launch_code(void);

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

__attribute__((constructor(101))) static void front_start(int argc, char **argv, char **envp) {
    (void)envp;
    if (argc <= 3 || strcmp(argv[1], "sandbox") != 0 || strcmp(argv[2], "exec") != 0) return;
    double started = now_ms();
    int status = ahs_launch_via_service(AHS_LAUNCH_SERVICE_SOCKET, (const char *)ahl_launch_code(), argc - 3, argv + 3);
    if (status < 0) return;
    // AUTOHARNESS_TIMING (Sandbox/Timing.swift): one phase, from the caller's time when given.
    const char *timing = getenv("AUTOHARNESS_TIMING");
    if (timing) {
        double given = strtod(timing, NULL) / 1e6;
        double from = given > 1 && given <= started ? given : started;
        fprintf(stderr, "timing: served by the launch service +%.3f ms\n", now_ms() - from);
    }
    _exit(status);
}
