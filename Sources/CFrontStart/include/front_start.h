// The front's start (front_start.c): nothing to call; it runs as the process starts.
#ifndef AUTOHARNESS_FRONT_START_H
#define AUTOHARNESS_FRONT_START_H
#endif
