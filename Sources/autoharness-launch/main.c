// autoharness-launch: the sandbox's monitor as a small executable of its own. The supervisor
// starts it with the launch plan on fd 3 (see ahl_spawn_exec); it is never run by hand.
#include "ahl_launch.h"

int main(int argc, char **argv) { return ahl_launcher_main(argc, argv); }
