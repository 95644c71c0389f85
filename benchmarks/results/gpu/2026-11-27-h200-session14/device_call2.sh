#!/usr/bin/env bash
# Device call 2 (same warm H200): call 1 brought back 8 of its 16 files (the device returns at most 8); this looked for
# the rest on the machine to pack them into one archive. Each call's $OUT is fresh: nothing was found, nothing used.
f=$(find / -name t5_small_b32_graphs.json -not -path "/proc/*" 2>/dev/null | head -1); d=$(dirname "$f"); echo "$d"; ls "$d"; tar czf $OUT/call1_rest.tgz -C "$d" .
