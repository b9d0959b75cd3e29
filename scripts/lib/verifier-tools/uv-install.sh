#!/bin/sh
# What uv's installer (https://astral.sh/uv/<version>/install.sh) leaves behind, offline: uv
# and uvx in $UV_INSTALL_DIR, $XDG_BIN_HOME or ~/.local/bin, and that directory's `env` file
# which puts it on PATH. The binaries are links to the verifier tools (read-only, @TOOLS@).
set -eu
dest="${UV_INSTALL_DIR:-${XDG_BIN_HOME:-$HOME/.local/bin}}"
mkdir -p "$dest"
ln -sf "@TOOLS@/bin/uv" "$dest/uv"
ln -sf "@TOOLS@/bin/uvx" "$dest/uvx"
cat > "$dest/env" <<ENV
#!/bin/sh
# add binaries to PATH if they aren't added yet
case ":\${PATH}:" in
    *:"$dest":*) ;;
    *) export PATH="$dest:\$PATH" ;;
esac
ENV
echo "installing to $dest (autoharness verifier tools: $("@TOOLS@/bin/uv" --version), offline)"
echo "everything's installed!"
