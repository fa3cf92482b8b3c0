#!/bin/sh
# Runs the named fuzz targets (default: all three) for FUZZ_SECONDS (600) each,
# one after the other (the build machine has 2 cores). New inputs go to
# work/<target> (not committed); the committed seeds in corpus/<target> are
# read only. Logs: work/<target>.log. FUZZ_KEEP_GOING=1 runs libFuzzer in
# fork mode, recording crashes / OOMs / timeouts in artifacts/<target> and
# carrying on, so one run lists every finding rather than only the first.
set -u
cd "$(dirname "$0")"
T=${FUZZ_SECONDS:-600}
for t in ${@:-checkpoint_loader config_json launch_validator}; do
  mkdir -p work/$t
  RUSTC_BOOTSTRAP=1 cargo fuzz run $t work/$t corpus/$t -- \
    ${FUZZ_KEEP_GOING:+-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1} -max_total_time=$T -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 \
    > work/$t.log 2>&1
  echo "$t exit $?" >> work/status.log
done
