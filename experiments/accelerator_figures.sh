#!/usr/bin/env bash
# The accelerator figures of docs/performance.md in one command, on whatever device JAX finds:
#
#   bash experiments/accelerator_figures.sh OUT_DIR [TRAINED_WORKDIR [MULTI30K_DIR]]
#
# 1. Training throughput and MFU (`transformer_jax.benchmark`) of the paper's base and big
#    models at its batch of about 25000 source + 25000 target tokens (section 5.1; 781 pairs of
#    32 + 32 tokens), in bfloat16 and float32: OUT_DIR/benchmark_{base,big}_{dtype}.json; and
#    each model in bfloat16 with the whole logits instead of the configs' fused projection and
#    loss (`train.loss_chunk` 0): OUT_DIR/benchmark_{base,big}_bfloat16_loss_chunk0.json; each
#    model in bfloat16 with dropout's masks from the rbg generator, with cuDNN's fused attention,
#    and with both (`train.dropout_prng_impl`, `model.attention_impl`):
#    OUT_DIR/benchmark_{base,big}_bfloat16_{rbg,cudnn,rbg_cudnn}.json; and where base's bfloat16
#    step spends its kernel time (experiments/profile_step.py):
#    OUT_DIR/profile_base_bfloat16.json.
# 2. With a trained workdir: beam-4 decoding speed on Multi30k test2016
#    (experiments/decode_speed.py, cached decoder only) and the same beside Hugging Face
#    transformers' MarianMTModel (experiments/decode_vs_torch.py, needs torch and
#    transformers): OUT_DIR/decode_speed.json, OUT_DIR/decode_vs_torch.json.
# 3. With Multi30k's raw files (MULTI30K_DIR; an empty TRAINED_WORKDIR skips step 2): real
#    target tokens/s of configs/multi30k.py without and with packing, interleaved
#    (experiments/packing_speed.py): OUT_DIR/packing_speed.json.
#
# Each command runs on even if an earlier one failed; a failure is reported at the end.
set -u
out=${1:?usage: accelerator_figures.sh OUT_DIR [TRAINED_WORKDIR [MULTI30K_DIR]]}
workdir=${2:-}
multi30k=${3:-}
python=${PYTHON:-python3}
mkdir -p "$out"
failed=()

# benchmark NAME CONFIG [OVERRIDE ...]: the benchmark's JSON into OUT_DIR/NAME.json.
benchmark() {
  local name=$1 config=$2
  shift 2
  echo "== $name"
  if "$python" -m transformer_jax.benchmark --config="configs/$config.py" "$@" --json \
      > "$out/$name.json"; then
    cat "$out/$name.json"
  else
    failed+=("$name")
  fi
}

for config in base big; do
  for dtype in bfloat16 float32; do
    benchmark "benchmark_${config}_${dtype}" "$config" --config.dtype="$dtype"
  done
  benchmark "benchmark_${config}_bfloat16_loss_chunk0" "$config" --config.dtype=bfloat16 \
      --config.train.loss_chunk=0
  benchmark "benchmark_${config}_bfloat16_rbg" "$config" --config.dtype=bfloat16 \
      --config.train.dropout_prng_impl=rbg
  benchmark "benchmark_${config}_bfloat16_cudnn" "$config" --config.dtype=bfloat16 \
      --config.model.attention_impl=cudnn
  benchmark "benchmark_${config}_bfloat16_rbg_cudnn" "$config" --config.dtype=bfloat16 \
      --config.train.dropout_prng_impl=rbg --config.model.attention_impl=cudnn
done

echo "== profile_base_bfloat16"
"$python" experiments/profile_step.py --config=configs/base.py --config.dtype=bfloat16 \
    --json="$out/profile_base_bfloat16.json" || failed+=(profile_base_bfloat16)

if [[ -n "$workdir" ]]; then
  echo "== decode_speed"
  "$python" experiments/decode_speed.py --workdir="$workdir" --split=test --beam_size=4 \
      --batch_size=64 --nouncached --json="$out/decode_speed.json" || failed+=(decode_speed)
  echo "== decode_vs_torch"
  "$python" experiments/decode_vs_torch.py --workdir="$workdir" --split=test --beam_size=4 \
      --batch_size=64 --repeats=2 --json="$out/decode_vs_torch.json" || failed+=(decode_vs_torch)
fi

if [[ -n "$multi30k" ]]; then
  echo "== packing_speed"
  "$python" experiments/packing_speed.py --manual_dir="$multi30k" --steps=300 --repeats=2 \
      --json="$out/packing_speed.json" || failed+=(packing_speed)
fi

if (( ${#failed[@]} )); then
  echo "failed: ${failed[*]}"
  exit 1
fi
