#!/usr/bin/env bash
# What each kernel family costs inside the replayed decode step: bench-model
# (default shape, cuda) with SWITCHYARD_TIMING_SKIP naming entry prefixes
# that are not launched (timing_skip.patch; outputs wrong, timing only).
set -u
BIN=${BIN:-./dist-skip/switchyard}
run() { # label, skip list, batch
    SWITCHYARD_TIMING_SKIP="$2" timeout 120 "$BIN" bench-model --backend cuda --batch "$3" --steps 32 > "${OUT:-.}/$1_b$3.txt" 2>&1
    echo "$1 | batch $3 | skip [$2] | $(grep -E 'tok/s|^\| *[0-9]' "${OUT:-.}/$1_b$3.txt" | tail -2 | tr '\n' ' ')"
}
for b in 1 16; do
run base "" $b
run no_qkv_prep qkv_prep $b
run no_attention attention_decode $b
run no_sandwich post_norm_add_pre_norm $b
run no_small3 qkv_prep,attention_decode,post_norm_add_pre_norm $b
run no_o_down dense_gemv_bf16 $b
run no_qkv dense_gemv_layer_out,dense_gemv_rmsnorm $b
run no_gate_up dense_gemv_gelu_mul $b
run no_head lm_head,argmax $b
run base_again "" $b
done
