#!/usr/bin/env bash
# The device's working tree travels whole and must stay under 64 MiB; the validation traces alone
# are more. `out` swaps each tracked trace under sample_traces/validation/v*/ for a link to a copy in
# HOLD (default /tmp/gpuscope-trace-hold), so only the links travel (the recorders read no trace);
# `back` restores them from git. Run from the repository root, before and after the device calls;
# the files read the same through the links meanwhile (ingest follows them). While they are out,
# git skips them (skip-worktree), so no `git add` or `commit -a` can take a link in; the suite's
# tests/test_tracked_files.py fails on any link in the tree.
#   bash sample_traces/validation/device_tree.sh out|back [HOLD]
set -eu
hold=${2:-/tmp/gpuscope-trace-hold}
case ${1:-} in
out)
    git ls-files -z 'sample_traces/validation/v*/*.json.gz' | while IFS= read -r -d '' f; do
        [ -L "$f" ] && continue
        mkdir -p "$hold/$(dirname "$f")"
        cp -p "$f" "$hold/$f"
        ln -sf "$hold/$f" "$f.link" && mv -f "$f.link" "$f"
        git update-index --skip-worktree -- "$f"
    done
    git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {printf "tracked, as it travels: %.1f MiB\n", s/1048576}'
    ;;
back)
    git ls-files -z 'sample_traces/validation/v*/*.json.gz' | while IFS= read -r -d '' f; do
        git update-index --no-skip-worktree -- "$f"
        if [ -L "$f" ]; then rm -f "$f" && git checkout -- "$f"; fi
    done
    ;;
*)
    echo "usage: $0 out|back [HOLD]" >&2
    exit 2
    ;;
esac
