#!/usr/bin/env bash
# The fixed variant's profiled trace of cases already recorded (their planted trace is in vNNN/),
# to read what a fix changed kernel by kernel where gpuscope's estimate missed (an analysis aid:
# nothing here is timed for truth.json). From the repository root on the device, $OUT set:
#   bash sample_traces/validation/fixed_traces_device.sh TAG PART:CASE[:VARIANT]...
# e.g. `... t1 blind4:v72 blind9:v148 blind4:v78:planted`; PART names record_PART.py; VARIANT
# (default fixed) may be `planted`, to trace both variants on one GPU where the planted trace in
# vNNN/ came from another kind (its folder is then CASE_planted/). One fresh process per case
# (record_new.py's `one --variant fixed --mode trace`: 40 timed steps, then the profiled ones).
# No case starts after FIXED_BUDGET_S (default 400) s; each is stopped at 150 s.
# Writes $OUT/fixed_TAG.tar.gz: CASE/ with the trace and one.log (its RESULT line).
set -u
. sample_traces/validation/device_env.sh  # multicast off, gpuscope importable
tag=$1
shift
dir=/tmp/fixed_$tag
for pc in "$@"; do
    if [ "$SECONDS" -gt "${FIXED_BUDGET_S:-400}" ]; then
        echo "budget: $pc not started"
        continue
    fi
    IFS=: read -r part case variant <<<"$pc"
    variant=${variant:-fixed}
    sub=$case
    [ "$variant" = fixed ] || sub=${case}_$variant
    mkdir -p "$dir/$sub"
    timeout -s INT 150 python3 "sample_traces/validation/record_$part.py" one --case "$case" \
        --variant "$variant" --mode trace --out "$dir/$sub" >"$dir/$sub/one.log" 2>&1
    echo "$sub rc=$? $(grep -c . "$dir/$sub/one.log") log lines"
    grep -E 'Error|RESULT' "$dir/$sub/one.log" | cut -c1-300 | tail -n 2
done
tar czf "$OUT/fixed_$tag.tar.gz" -C "$dir" .
