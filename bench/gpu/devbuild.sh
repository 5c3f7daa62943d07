# bench/gpu/devbuild.sh: sourced by the GPU scripts (perf-run.sh, stalls.sh, pair-120b.sh,
# compare-llama-cpp.sh), from the repository root, to find the build packed by
# pack-perf-build.sh: carried as .devbuild.tar.xz (unpacked here into .devbuild, once) or
# as .devbuild. On success sets DEVBUILD_BIN (the build directory inside the pack) and
# DEVBUILD_LIB (its shared libraries) and returns 0; returns 1 when there is no pack.
devbuild_find() {
    if [ ! -d .devbuild ] && [ -f .devbuild.tar.xz ]; then
        mkdir -p .devbuild && tar -xJf .devbuild.tar.xz -C .devbuild
    fi
    DEVBUILD_BIN=$(ls -d .devbuild/build-cuda .devbuild/build 2>/dev/null | head -1)
    DEVBUILD_LIB=$PWD/.devbuild/lib
    [ -n "$DEVBUILD_BIN" ]
}
