#!/usr/bin/env bash
# Issue 16's run-to-completion check: every hostile-input class, tried
# against the release binary under `ulimit -v 4194304` (4 GiB of address
# space) and `timeout 60`, one row per input.
#
#   cargo build --release -p switchyard-cli
#   scripts/hostile_inputs.sh            # markdown table on stdout
#
# A refusal passes when it exits 1 or 2 (not a panic's 101, not a signal,
# not timeout's 124), stderr says something and holds no "panicked" and no
# raw control character, stdout is empty, and the peak RSS is under 4 GiB.
# A closed stdout must end in a quiet 141; the acceptable inputs must exit 0
# with a result. The last line counts the failures; the exit status is 1 if
# there are any. SWITCHYARD_BIN overrides the binary.
set -u
cd "$(dirname "$0")/.."
BIN=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$BIN" ] || { echo "no binary at $BIN (cargo build --release -p switchyard-cli)" >&2; exit 2; }
BIN=$(realpath "$BIN")
VLIM=4194304
FX=$(realpath tests/fixtures/tiny-dense)
W=$(mktemp -d /tmp/switchyard-hostile.XXXXXX)
trap 'rm -rf "$W"' EXIT
FAILS=0
ESC=$'\e]0;pwned\a\e[2J'

# fixture NAME: a copy of the tiny-dense checkpoint at $W/NAME.
fixture() { mkdir -p "$W/$1" && cp "$FX/config.json" "$FX/model.safetensors" "$W/$1/"; }
# edit_config NAME PYTHON: runs PYTHON on `c` (the parsed config.json) and writes it back.
edit_config() {
  python3 - "$W/$1/config.json" "$2" <<'EOF'
import json, sys
p, code = sys.argv[1], sys.argv[2]
c = json.load(open(p))
exec(code)
open(p, "w").write(json.dumps(c))
EOF
}

# measure MODE CMD...: runs CMD with the limits; MODE is file (stdout to a
# file), closed (stdout a pipe whose reader has exited) or full (/dev/full).
measure() {
  local mode=$1; shift
  : > "$W/out"; rm -f "$W/time"
  case $mode in
    file) ( ulimit -v $VLIM; timeout 60 /usr/bin/time -v -o "$W/time" "$@" > "$W/out" 2> "$W/err" < /dev/null ) ;;
    # The pipe's read end is closed before the command starts, so every
    # write fails, even one small enough for the pipe's buffer.
    closed) ( ulimit -v $VLIM; python3 -c 'import os, subprocess, sys
r, w = os.pipe(); os.close(r)
sys.exit(subprocess.call(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=w))' timeout 60 /usr/bin/time -v -o "$W/time" "$@" 2> "$W/err" ) ;;
    full) ( ulimit -v $VLIM; timeout 60 /usr/bin/time -v -o "$W/time" "$@" > /dev/full 2> "$W/err" < /dev/null ) ;;
  esac
  RC=$?
}

rss_mib() { awk -F': ' '/Maximum resident set size/ { printf "%.0f", $2 / 1024 }' "$W/time" 2>/dev/null; }

# row CLASS INPUT EXPECT MODE CMD...: one line of the table. EXPECT is
# refuse, quiet (stdout closed: exit 141, nothing on stderr) or ok.
row() {
  local class=$1 input=$2 expect=$3 mode=$4; shift 4
  measure "$mode" "$@"
  local first rss empty verdict=pass
  first=$(head -n 1 "$W/err" | cut -c 1-160 | sed 's/|/\\|/g')
  rss=$(rss_mib); rss=${rss:-?}
  if [ -s "$W/out" ]; then empty=no; else empty=yes; fi
  if grep -q panicked "$W/err" || LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$W/err"; then verdict=FAIL; fi
  case $expect in
    refuse) { [ "$RC" = 1 ] || [ "$RC" = 2 ]; } && [ -s "$W/err" ] && [ $empty = yes ] || verdict=FAIL ;;
    quiet) [ "$RC" = 141 ] && [ ! -s "$W/err" ] || verdict=FAIL ;;
    ok) [ "$RC" = 0 ] && [ $empty = no ] || verdict=FAIL ;;
  esac
  if [ "$rss" != "?" ] && [ "$rss" -ge 4096 ]; then verdict=FAIL; fi
  [ $verdict = pass ] || FAILS=$((FAILS + 1))
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$class" "$input" "$RC" "${first:-(empty)}" "$empty" "$rss" "$verdict"
}

echo "Binary: \`$BIN\`; each run under \`ulimit -v $VLIM\` and \`timeout 60\`; RSS by \`/usr/bin/time -v\`."
echo
echo "| class | input | exit | stderr, first line | stdout empty | peak RSS MiB | result |"
echo "|---|---|---|---|---|---|---|"

# 1. Integer flags and config sizes at their type's extremes.
C="1 integers"
row "$C" "generate --max-new-tokens 2^59" refuse file "$BIN" generate --max-new-tokens 576460752303423488
row "$C" "generate --max-new-tokens 2^64-1" refuse file "$BIN" generate --max-new-tokens 18446744073709551615
row "$C" "generate --max-new-tokens 2^64" refuse file "$BIN" generate --max-new-tokens 18446744073709551616
row "$C" "bench --iters 2^64-1" refuse file "$BIN" bench --iters 18446744073709551615
row "$C" "bench-model --steps 2^64-1" refuse file "$BIN" bench-model --steps 18446744073709551615
row "$C" "bench-model --prompt-len 2^64-1" refuse file "$BIN" bench-model --prompt-len 18446744073709551615
row "$C" "bench-model --hidden 2^64-8" refuse file "$BIN" bench-model --hidden 18446744073709551608
row "$C" "bench-model --vocab 2^64-1" refuse file "$BIN" bench-model --vocab 18446744073709551615
row "$C" "bench-model --layers 2^64-1" refuse file "$BIN" bench-model --layers 18446744073709551615
row "$C" "bench-model --batch 2^64-1" refuse file "$BIN" bench-model --batch 18446744073709551615
row "$C" "bench-model --prefill-len 2^64-1" refuse file "$BIN" bench-model --prefill-len 18446744073709551615
row "$C" "bench-model --prefill-passes 2^64-1" refuse file "$BIN" bench-model --prefill-len 8 --prefill-passes 18446744073709551615
row "$C" "parity --seed 2^64" refuse file "$BIN" parity --seed 18446744073709551616
fixture ctx64; edit_config ctx64 'c["max_position_embeddings"] = 2**64 - 1'
row "$C" "max_position_embeddings 2^64-1, --max-new-tokens 2^59 (KV slots)" refuse file "$BIN" generate --model "$W/ctx64" --max-new-tokens 576460752303423488
fixture ctx40; edit_config ctx40 'c["max_position_embeddings"] = 2**40'
row "$C" "max_position_embeddings 2^40, --max-new-tokens 2^30 (KV bytes)" refuse file "$BIN" generate --model "$W/ctx40" --max-new-tokens 1073741824
fixture vocab; edit_config vocab 'c["vocab_size"] = 2**64 - 1'
row "$C" "vocab_size 2^64-1" refuse file "$BIN" generate --model "$W/vocab" --prompt-ids 1
fixture heads; edit_config heads 'c["num_attention_heads"] = 2**62'
row "$C" "num_attention_heads 2^62" refuse file "$BIN" generate --model "$W/heads"
fixture hidden; edit_config hidden 'c["hidden_size"] = 10**9'
row "$C" "hidden_size 10^9" refuse file "$BIN" generate --model "$W/hidden"
fixture layers; edit_config layers 'c["num_hidden_layers"] = 10**9; c.pop("layer_types")'
row "$C" "num_hidden_layers 10^9" refuse file "$BIN" generate --model "$W/layers"
# A consistent checkpoint whose embedding alone is 3 GB (a sparse file): it
# maps, but no host copy of that tensor fits in the 4 GiB address space.
fixture bigtensor; edit_config bigtensor 'c["vocab_size"] = 15_625_000'
python3 - "$W/bigtensor/model.safetensors" <<'EOF2'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
data = b[8 + n:]
out, blobs, off = {}, [], 0
for name, t in h.items():
    if name == "__metadata__" or name.endswith("embed_tokens.weight"):
        continue
    s, e = t["data_offsets"]
    out[name] = dict(t, data_offsets=[off, off + e - s])
    blobs.append(data[s:e])
    off += e - s
emb = 15_625_000 * 96 * 2
out["model.embed_tokens.weight"] = {"dtype": "BF16", "shape": [15_625_000, 96], "data_offsets": [off, off + emb]}
hb = json.dumps(out).encode()
hb += b" " * (-len(hb) % 8)
with open(p, "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
    f.truncate(8 + len(hb) + off + emb)
EOF2
row "$C" "consistent checkpoint with a 3 GB tensor (sparse)" refuse file "$BIN" generate --model "$W/bigtensor" --prompt-ids 1

# 2. Context limits.
C="2 context"
ids() { python3 -c "print(','.join(['1'] * $1))"; }
row "$C" "257-id prompt, 256-position model" refuse file "$BIN" generate --prompt-ids "$(ids 257)"
row "$C" "60,000-id prompt, 256-position model" refuse file "$BIN" generate --prompt-ids "$(ids 60000)"
row "$C" "200-id prompt + --max-new-tokens 100" refuse file "$BIN" generate --prompt-ids "$(ids 200)" --max-new-tokens 100

# 3. Paths that are not regular files.
C="3 files"
fixture fifo-cfg; rm "$W/fifo-cfg/config.json"; mkfifo "$W/fifo-cfg/config.json"
row "$C" "config.json a FIFO" refuse file "$BIN" generate --model "$W/fifo-cfg"
fixture fifo-st; rm "$W/fifo-st/model.safetensors"; mkfifo "$W/fifo-st/model.safetensors"
row "$C" "model.safetensors a FIFO" refuse file "$BIN" generate --model "$W/fifo-st"
fixture fifo-idx; rm "$W/fifo-idx/model.safetensors"; mkfifo "$W/fifo-idx/model.safetensors.index.json"
row "$C" "index a FIFO" refuse file "$BIN" generate --model "$W/fifo-idx"
fixture zero; rm "$W/zero/config.json"; ln -s /dev/zero "$W/zero/config.json"
row "$C" "config.json -> /dev/zero" refuse file "$BIN" generate --model "$W/zero"
fixture dir; rm "$W/dir/config.json"; mkdir "$W/dir/config.json"
row "$C" "config.json a directory" refuse file "$BIN" generate --model "$W/dir"
fixture dot; rm "$W/dot/model.safetensors"; echo '{"weight_map": {"model.norm.weight": "."}}' > "$W/dot/model.safetensors.index.json"
row "$C" "shard named ." refuse file "$BIN" generate --model "$W/dot"
fixture loop; rm "$W/loop/model.safetensors"; ln -s model.safetensors "$W/loop/model.safetensors"
row "$C" "model.safetensors a symlink loop" refuse file "$BIN" generate --model "$W/loop"
fixture dangling; rm "$W/dangling/model.safetensors"; ln -s nowhere.safetensors "$W/dangling/model.safetensors"
row "$C" "model.safetensors a dangling symlink" refuse file "$BIN" generate --model "$W/dangling"
row "$C" "--model a regular file" refuse file "$BIN" generate --model "$FX/config.json"
row "$C" "--model /dev/zero" refuse file "$BIN" generate --model /dev/zero
fixture bigcfg; truncate -s 300M "$W/bigcfg/config.json"
row "$C" "config.json 300 MB (sparse)" refuse file "$BIN" generate --model "$W/bigcfg"
fixture bigst; truncate -s 10G "$W/bigst/model.safetensors"
row "$C" "model.safetensors 10 GB (sparse) under 4 GiB of address space" refuse file "$BIN" generate --model "$W/bigst"
fixture cap
row "$C" "SWITCHYARD_MAX_JSON_BYTES=100" refuse file env SWITCHYARD_MAX_JSON_BYTES=100 "$BIN" generate --model "$W/cap"
row "$C" "SWITCHYARD_MAX_JSON_BYTES=lots" refuse file env SWITCHYARD_MAX_JSON_BYTES=lots "$BIN" generate --model "$W/cap"

# 4. Attacker-sized input.
C="4 quadratic"
mkdir -p "$W/index300k" "$W/index300k-one"; cp "$FX/config.json" "$W/index300k/"; cp "$FX/config.json" "$W/index300k-one/"
python3 -c "
import json
json.dump({'weight_map': {f't{i:06}': f'shard-{i:06}.safetensors' for i in range(300000)}}, open('$W/index300k/model.safetensors.index.json', 'w'))
json.dump({'weight_map': {f't{i:06}': 'shard.safetensors' for i in range(300000)}}, open('$W/index300k-one/model.safetensors.index.json', 'w'))"
row "$C" "index of 300,000 tensors, 300,000 missing shards" refuse file "$BIN" generate --model "$W/index300k"
row "$C" "index of 300,000 tensors, one missing shard" refuse file "$BIN" generate --model "$W/index300k-one"

# 5. stdout closed or full.
C="5 stdout"
for mode in closed full; do
  expect=refuse; [ $mode = closed ] && expect=quiet
  row "$C" "kernels, stdout $mode" $expect $mode "$BIN" kernels
  row "$C" "info, stdout $mode" $expect $mode "$BIN" info
  row "$C" "generate, stdout $mode" $expect $mode "$BIN" generate --max-new-tokens 2
  row "$C" "generate --json, stdout $mode" $expect $mode "$BIN" generate --json --max-new-tokens 1
  row "$C" "parity, stdout $mode" $expect $mode "$BIN" parity --backend cpu --filter rmsnorm
  row "$C" "bench, stdout $mode" $expect $mode "$BIN" bench --backend cpu --iters 1 --filter rmsnorm_bf16 --scale small
  row "$C" "bench-model, stdout $mode" $expect $mode "$BIN" bench-model --layers 1 --hidden 64 --vocab 64 --batch 1 --prompt-len 4 --steps 1
  row "$C" "synthetic, stdout $mode" $expect $mode "$BIN" synthetic --out "$W/syn-$mode"
  row "$C" "--help, stdout $mode" $expect $mode "$BIN" --help
  row "$C" "--version, stdout $mode" $expect $mode "$BIN" --version
done

# 6. Untrusted text echoed raw.
C="6 escapes"
fixture esc; edit_config esc "c['model_type'] = '\x1b]0;pwned\x07\x1b[2J\u009b31m\u202e'"
row "$C" "model_type with OSC/CSI/C1/bidi" refuse file "$BIN" generate --model "$W/esc"
row "$C" "--model path with ESC" refuse file "$BIN" generate --model "/nonexistent/$ESC"
row "$C" "--prompt-ids with ESC" refuse file "$BIN" generate --prompt-ids "1,$ESC"
row "$C" "--max-new-tokens with ESC" refuse file "$BIN" generate --max-new-tokens "$ESC"
row "$C" "--quant with ESC" refuse file "$BIN" generate --quant "$ESC"
row "$C" "bench --scale with ESC" refuse file "$BIN" bench --scale "$ESC"
row "$C" "SWITCHYARD_BACKEND with ESC" refuse file env "SWITCHYARD_BACKEND=$ESC" "$BIN" generate
row "$C" "SWITCHYARD_BACKEND not UTF-8" refuse file env "SWITCHYARD_BACKEND=$(printf 'cp\377u')" "$BIN" generate
row "$C" "SWITCHYARD_WGPU_ADAPTER with ESC" refuse file env "XDG_RUNTIME_DIR=$W" "SWITCHYARD_WGPU_ADAPTER=$ESC" "$BIN" info --backend wgpu
row "$C" "SWITCHYARD_CUDA_DEVICE with ESC" refuse file env "SWITCHYARD_CUDA_DEVICE=$ESC" "$BIN" bench --backend cuda
row "$C" "SWITCHYARD_MAX_JSON_BYTES with ESC" refuse file env "SWITCHYARD_MAX_JSON_BYTES=$ESC" "$BIN" generate --model "$FX"
mkdir -p "$W/esc-index"; cp "$FX/config.json" "$W/esc-index/"
python3 -c "import json; json.dump({'weight_map': {'t\x1b[2J': '../\x1b]0;x\x07'}}, open('$W/esc-index/model.safetensors.index.json', 'w'))"
row "$C" "index tensor and shard names with ESC" refuse file "$BIN" generate --model "$W/esc-index"

# 7. Errors that blame the wrong thing.
C="7 blame"
fixture ghd; edit_config ghd 'c.pop("per_layer_config"); c["global_head_dim"] = 44'
row "$C" "global_head_dim 44, no per_layer_config" refuse file "$BIN" generate --model "$W/ghd"
fixture gkv; edit_config gkv 'c.pop("per_layer_config"); c["attention_k_eq_v"] = True; c["num_global_key_value_heads"] = 3'
row "$C" "num_global_key_value_heads 3" refuse file "$BIN" generate --model "$W/gkv"
fixture theta; edit_config theta 'c["rope_parameters"]["sliding_attention"]["rope_theta"] = 1e-50'
row "$C" "rope_theta 1e-50" refuse file "$BIN" generate --model "$W/theta"

# 8. Ambiguous input.
C="8 ambiguous"
fixture plc; edit_config plc 'c["per_layer_config"] = {"2": {"head_dim": 48}, "02": {"head_dim": 48}}'
row "$C" "per_layer_config keys 2 and 02" refuse file "$BIN" generate --model "$W/plc"
fixture dupkey; sed -i 's/"hidden_size": 96,/"hidden_size": 96, "hidden_size": 128,/' "$W/dupkey/config.json"
row "$C" "config key given twice" refuse file "$BIN" generate --model "$W/dupkey"
fixture duptensor
python3 - "$W/duptensor/model.safetensors" <<'EOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = b[8:8 + n].decode().rstrip()
entry = json.dumps(json.loads(h)["model.norm.weight"])
h = (h[:-1] + ',"model.norm.weight":' + entry + "}").encode()
h += b" " * (-len(h) % 8)
open(p, "wb").write(struct.pack("<Q", len(h)) + h + b[8 + n:])
EOF
row "$C" "tensor listed twice in a safetensors header" refuse file "$BIN" generate --model "$W/duptensor"
fixture wrongshard; mv "$W/wrongshard/model.safetensors" "$W/wrongshard/a.safetensors"
python3 - "$W/wrongshard" <<'EOF'
import json, struct, sys
d = sys.argv[1]
h = b'{"extra":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}'
h += b" " * (-len(h) % 8)
open(d + "/b.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(8))
json.dump({"weight_map": {"extra": "b.safetensors", "model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "b.safetensors"}},
          open(d + "/model.safetensors.index.json", "w"))
EOF
row "$C" "index maps a tensor to the wrong shard" refuse file "$BIN" generate --model "$W/wrongshard"

# 9. Writes that follow symlinks.
C="9 symlinks"
mkdir -p "$W/victim"; ln -s "$W/victim" "$W/outlink"
row "$C" "synthetic --out a symlink to a directory" refuse file "$BIN" synthetic --out "$W/outlink"
[ -z "$(ls -A "$W/victim")" ] || { echo "| $C | (victim directory was written) | | | | | FAIL |"; FAILS=$((FAILS + 1)); }
mkdir -p "$W/planted"; echo keep > "$W/precious"; ln -s "$W/precious" "$W/planted/config.json"
row "$C" "synthetic --out with config.json a planted symlink" refuse file "$BIN" synthetic --out "$W/planted"
[ "$(cat "$W/precious")" = keep ] || { echo "| $C | (planted link target overwritten) | | | | | FAIL |"; FAILS=$((FAILS + 1)); }

# Acceptable input still works.
C="acceptable"
fixture bigfield; edit_config bigfield 'c["notes"] = "n" * (100 << 20)'
row "$C" "config.json with a 100 MB unknown field" ok file "$BIN" generate --model "$W/bigfield" --max-new-tokens 4
expected=$("$BIN" generate --model "$FX" --max-new-tokens 4 2>/dev/null)
[ "$(cat "$W/out")" = "$expected" ] || { echo "| $C | (100 MB field: tokens differ from the fixture's) | | | | | FAIL |"; FAILS=$((FAILS + 1)); }
fixture shared
for k in 1 2 3 4; do
  ( ulimit -v $VLIM; timeout 60 /usr/bin/time -v -o "$W/time$k" "$BIN" generate --model "$W/shared" --max-new-tokens 8 > "$W/out$k" 2> "$W/err$k" < /dev/null; echo $? > "$W/rc$k" ) &
done
wait
rcs=$(cat "$W"/rc1 "$W"/rc2 "$W"/rc3 "$W"/rc4 | tr '\n' ' ')
peak=$(cat "$W"/time1 "$W"/time2 "$W"/time3 "$W"/time4 | awk -F': ' '/Maximum resident/ { if ($2 > m) m = $2 } END { printf "%.0f", m / 1024 }')
same=yes; for k in 2 3 4; do cmp -s "$W/out1" "$W/out$k" || same=no; done
verdict=pass; [ "$rcs" = "0 0 0 0 " ] && [ $same = yes ] && [ -s "$W/out1" ] || verdict=FAIL
[ $verdict = pass ] || FAILS=$((FAILS + 1))
echo "| $C | 4 concurrent generate on one directory | $rcs| $(head -n 1 "$W/err1" | cut -c 1-120) | no (identical: $same) | $peak | $verdict |"

echo
echo "$FAILS failed"
[ $FAILS = 0 ]
