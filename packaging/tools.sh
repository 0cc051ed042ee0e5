# Sourced by tests/setup.sh (which installs these) and packaging/build.sh (which uses them).
# Zig and cargo-zigbuild from PyPI (wheels: seconds, where `cargo install cargo-zigbuild` compiles
# for minutes), in a virtual environment of their own (Debian's Python refuses system-wide pip);
# cargo-zigbuild runs Zig as `python3 -m ziglang` with the environment's bin first in PATH.
PYPI_TOOLS=(ziglang==0.15.2 cargo-zigbuild==0.24.1)
ZIGLANG_VENV=${ZIGLANG_VENV:-${XDG_DATA_HOME:-$HOME/.local/share}/hpcnode_exporter/ziglang-venv}
# The oldest glibc the packaged binary runs on: RHEL/CentOS 7. Every later distribution has more.
GLIBC_FLOOR=2.17
# cargo's packagers, NAME@VERSION (`cargo NAME --version` prints VERSION).
CARGO_TOOLS=(deb@3.8.0)
