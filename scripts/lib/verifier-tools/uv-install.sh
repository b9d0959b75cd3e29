#!/bin/sh
# What uv's installer (https://astral.sh/uv/<version>/install.sh) does, offline: nothing is
# left to do. The toolbox binds what it would leave behind (uv and uvx in ~/.local/bin, that
# directory's `env` file) read-only at the verifier's $HOME/.local before the test script
# starts, so no program runs here: on a task's image every program but the toolbox's is the
# agent's. Shell builtins only.
echo "installing to $HOME/.local/bin (autoharness verifier tools: uv from @TOOLS@, offline)"
echo "everything's installed!"
