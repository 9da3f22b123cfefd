#!/bin/bash
# Sourced by the benchmarks that run on a machine without the project's venv (big_rank_device.sh,
# ranks_device.sh). lay_out_gpuscope WORK SITE_TAR: unpack SITE_TAR (a tar.xz of duckdb & co. as
# `pip install --target`) into WORK/site once, lay the package out from this checkout under
# WORK/pkg (app/ is gpuscope, the other layers inside it) and build the compiled parser there.
# Returns 1 when the tar does not unpack, 2 when the parser does not build (the carried .so stays).
lay_out_gpuscope() {
    local work=$1 site_tar=$2
    mkdir -p "$work/site" "$work/pkg/gpuscope"
    [ -f "$work/site/.unpacked" ] || { tar -xJf "$site_tar" -C "$work/site" && touch "$work/site/.unpacked"; } || return 1
    cp -r app/. "$work/pkg/gpuscope/"
    local d
    for d in ingest analysis vocabulary store; do
        rm -rf "${work:?}/pkg/gpuscope/$d"
        cp -r "$d" "$work/pkg/gpuscope/$d"
    done
    local inc
    inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    gcc -O2 -shared -fPIC -DPy_LIMITED_API=0x030B0000 -I"$inc" ingest/_compiled_parser.c \
        -o "$work/pkg/gpuscope/ingest/_compiled_parser.abi3.so" || return 2
}
