# Shared by the session scripts under benchmarks/ that run on the H200
# (source it from the repository root): the setup every call makes and the
# steps several calls repeat. The binary is $S (default ./dist-next/switchyard);
# the summary goes to $X under $OUT.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/summary.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_REQUIRE_WGPU=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=${S:-./dist-next/switchyard}

# Seconds since the script started, into the summary.
t() { echo "-- $((SECONDS - START)) s" >> $X; }

# bm TAG CMD...: the table rows of a bench-model run, tagged.
bm() { local tag=$1; shift; timeout 60 "$@" 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }

# san TOOL FILTER [VAR=VALUE]: compute-sanitizer over the parity cases of FILTER on cuda.
san() {
  env ${3:-SY_NONE=1} timeout 60 compute-sanitizer --tool $1 $S parity --backend cuda --filter $2 >> $OUT/san_$1.txt 2>&1
  echo "rc=$? ($1 $2 ${3:-})" >> $OUT/san_$1.txt
}

# fixtures [BACKENDS [FIXTURES]]: HF fixtures, greedy, against HF's expected.json
# (default: the six of them on cuda and wgpu).
fixtures() {
  local be fx
  for be in ${1:-cuda wgpu}; do
    for fx in ${2:-tiny-dense tiny-moe tiny-e2b tiny-e4b tiny-26b-a4b tiny-31b}; do
      timeout 30 $S generate --model tests/fixtures/$fx --backend $be --prompt-ids 2,17,99,5,250,31 \
        --max-new-tokens 10 --ignore-eos --json > /tmp/$fx.$be.json 2>>$OUT/model_err.txt
      python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json /tmp/$fx.$be.json "$fx on $be vs HF" | tail -1 >> $X
    done
  done
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
