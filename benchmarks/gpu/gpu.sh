#!/usr/bin/env bash
# The GPU benchmarks in one command, most important first, within GPU_BUDGET_S seconds (default 300):
#   (a) bf16 autocast at the Gemma-sized row (N=8192, H=2304, V=256000), peaked inputs (benchmarks/common/_peaked.py):
#       naive, naive + transformers' float32 upcast, three bare GEMMs and the FLOP floor, torch's F.linear_cross_entropy
#       where the torch has it, Liger-Kernel (no bias, and with a bias), Cut Cross-Entropy (filter on and off), hf_heads
#       softmax with every chunk kernel, margin rows (arc + log-unigram + max-norm, lsm), sparse k=20;
#   (b) the correctness of every chunk kernel and every head on the device (benchmarks/gpu/gpu_check.py);
#   (c) float32 at the Gemma-sized row with TF32 off, then on;
#   (d) the rest: N=4096 H=512 V=50k in bf16 and float32, the sampled and sparse tables, a whole-model step.
# Written to docs/results/gpu_<device>.md (or $OUT/ when set) with the device and the versions named; each command
# gets at most its own limit and never more than what is left of the budget, and one cut short says so in the file
# (its rows as measured are in gpu_<device>_progress.log beside it). Exits 1 when a command failed.
#
#   make gpu-wheels              # beside the repository, once: .whl/ with the peers' wheels
#   bash benchmarks/gpu/gpu.sh   # on a machine with a CUDA GPU and PyTorch (benchmarks/README.md)
#   GPU_DRY_RUN=1 OUT=/tmp/dry bash benchmarks/gpu/gpu.sh   # every section at toy sizes on the CPU
#                                                           # (tests/project/test_gpu_script.py)
#
# Wheels in .whl/ (make gpu-wheels) are installed first into /tmp/site, ahead on PYTHONPATH (no network needed).
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}  # the interpreter (the tests pass their own)
dry=${GPU_DRY_RUN:-0}
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
# every row in one process per table (no Python start per row): on CUDA the allocator's peak is reset per row
export HF_HEADS_BENCH_IN_PROCESS=1
if [[ $dry == 1 ]]; then
  export TRITON_INTERPRET=1  # the Triton kernels under Triton's CPU interpreter
  dev=cpu device=cpu-dry-run outdir=${OUT:-${TMPDIR:-/tmp}}
  # toy sizes: the Triton interpreter runs a Python loop per row
  gemma="--tokens 8 --hidden 8 --vocab 64" small="--tokens 8 --hidden 8 --vocab 48"
  # the option sets that between them take every option (tests/losses/test_kernels.py checks each alone)
  check="--rows 16 --hidden 8 --vocab 53 --compile_backend eager --options softcap top-k-target-smoothing frozen-w
    z-loss-weights-top-k predictions" compile="--compile_backend eager"
  whole="--vocab 64 --hidden 16 --layers 1 --batch 2 --block 8 --repeats 1" reps=1 sampled="--num_samples 8"
  # (d) repeats (a)'s rows at the same toy sizes here: two rows check its commands (every row runs on a GPU)
  rest=(--methods "naive logits, softmax" "hf_heads arc+log-unigram+max-norm, triton kernel")
else
  if compgen -G ".whl/*.whl" >/dev/null; then  # make gpu-wheels: the peers, transformers 5.23 and what it checks
    $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PYTHONPATH
  fi
  dev=cuda device=$($py -c "import torch; print(torch.cuda.get_device_name(0).replace(' ', '-'))")
  outdir=${OUT:-docs/results}
  gemma="--tokens 8192 --hidden 2304 --vocab 256000" small="--tokens 4096 --hidden 512 --vocab 50000"
  check="" compile="" reps=5 sampled="" rest=()
  whole="--vocab 128256 --hidden 2048 --layers 4 --batch 8 --block 1024 --repeats 5 --memory_cap_gib 40 --search_trials 4"
fi
mkdir -p "$outdir"
out=$outdir/gpu_${device}.md
progress=$outdir/gpu_${device}_progress.log  # each row as it is measured: what a command cut short had
: >"$progress"
failed=$outdir/.gpu_${device}_failed
: >"$failed"
budget=${GPU_BUDGET_S:-300}
deadline=$(($(date +%s) + budget))

# run SECONDS CMD...: the command with at most SECONDS (and never past the deadline); a stop or a failure is noted
run() {
  local limit=$1 left=$((deadline - $(date +%s)))
  shift
  ((left < limit)) && limit=$left
  if ((limit < 10)); then
    echo "(not run: the time budget is spent)"
    return
  fi
  echo "## $(date -u +%T) (limit ${limit} s) $(printf '%q ' "$@")" >>"$progress"
  local status=1
  if [[ $dry == 1 ]]; then  # in the one Python process of benchmarks/common/_inproc.py (no limit: toy sizes)
    printf '%q ' "$@" >&"${INPROC[1]}" && echo >&"${INPROC[1]}"
    local line="" status=1
    while IFS= read -r line <&"${INPROC[0]}"; do
      [[ $line == "@@done "* ]] && status=${line#@@done } && break
      echo "$line"
    done
  else
    timeout "$limit" "$@" 2>>"$progress"
    status=$?
  fi
  if ((status == 124)); then
    echo "(cut short: stopped after ${limit} s; the rows measured so far are in ${progress##*/})"
  elif ((status != 0)); then
    echo "(failed: exit ${status}; its error is in ${progress##*/})"
    printf '%q ' "$@" >>"$failed" && echo >>"$failed"
  fi
}

# block LIMIT TITLE CMD...: a titled fenced block of one command's output
block() {
  local limit=$1 title=$2
  shift 2
  printf '\n### %s\n\n`%s`\n\n```\n' "$title" "$(printf '%q ' "$@" | sed 's/ $//')"
  run "$limit" "$@"
  echo '```'
}

bm="$py benchmarks/speed/bench_margin.py --device $dev --repeats $reps"
MAIN=("naive logits, softmax" "three bare GEMMs" "torch F.linear" "Liger-Kernel" "Cut Cross-Entropy"
  "hf_heads softmax" "hf_heads arc+log-unigram+max-norm, triton kernel" "hf_heads lsm m=2, triton kernel")
versions=$($py - <<'EOF'
import importlib.metadata as md, platform, torch
names = ["torch", "triton", "transformers", "accelerate", "liger-kernel", "cut-cross-entropy"]
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"
print(f"Python {platform.python_version()}, " + ", ".join(f"{n} {version(n)}" for n in names))
EOF
)
{
  if [[ $dry == 1 ]]; then  # one Python process runs every command: torch and hf_heads imported once
    coproc INPROC { "$py" -u benchmarks/common/_inproc.py 2>>"$progress"; }
  fi
  echo "# GPU benchmarks on ${device}"
  echo
  echo "\`bash benchmarks/gpu/gpu.sh\` ($(date -u +%F), budget ${budget} s, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')); ${versions}"
  echo
  echo "## (a) bf16 autocast, the Gemma-sized row (${gemma}), peaked inputs"
  block 150 "output layer: naive, floors, peers, hf_heads softmax and margin" \
    $bm $gemma --autocast bf16 --inputs peaked --methods "${MAIN[@]}" --exclude compiled "word_norm" "context_norm" "frozen"
  block 40 "sparse-softmax k=20" $py benchmarks/speed/bench_sparse.py --device $dev --repeats $reps $gemma --k 20 \
    --autocast bf16 --inputs peaked
  block 40 "loss options against the plain softmax step: z-loss, class weights (automatic kernel)" \
    $py benchmarks/speed/bench_loss_options.py --device $dev $gemma --autocast bf16 --rounds $reps
  block 60 "hf_heads softmax, compiled kernel (its compilation in the warm-up call)" \
    $bm $gemma --autocast bf16 --inputs peaked --methods "hf_heads softmax, compiled" $compile
  echo
  echo "## (b) correctness of every chunk kernel and every head on the device"
  block 150 "gpu_check" $py benchmarks/gpu/gpu_check.py --device $dev $check
  echo
  echo "## (c) float32 at the Gemma-sized row, TF32 off and on"
  for tf32 in 0 1; do
    block 75 "float32, TF32 $([[ $tf32 == 1 ]] && echo on || echo off)" $bm $gemma --inputs peaked --tf32 $tf32 \
      --methods "naive logits, softmax" "three bare GEMMs" "Liger-Kernel fused linear CE, no bias" \
      "Cut Cross-Entropy, filter on" "hf_heads softmax, triton kernel"
  done
  echo
  echo "## (d) the rest: smaller shapes, every margin option, sampled, sparse, a whole-model step"
  for amp in "--autocast bf16" ""; do
    block 60 "output layer, ${small} ${amp:-float32}" $bm $small $amp --inputs peaked --exclude compiled "${rest[@]}"
    block 30 "sparse-softmax k=20 ${small} ${amp:-float32}" $py benchmarks/speed/bench_sparse.py --device $dev \
      --repeats $reps $small $amp --k 20 --inputs peaked
    block 40 "sampled criteria ${small} ${amp:-float32}" $py benchmarks/speed/bench_sampled.py --device $dev \
      --repeats $reps --modes "output layer" $small $amp $sampled
  done
  block 40 "sampled criteria at the Gemma-sized row, bf16" $py benchmarks/speed/bench_sampled.py --device $dev \
    --repeats $reps --modes "output layer" $gemma --autocast bf16 $sampled
  block 120 "whole-model bf16 training step" $py benchmarks/speed/bench_whole_model.py --device $dev $whole
} 2>&1 | tee "$out"
echo "written: $out (rows as measured: $progress)"
if [[ -s $failed ]]; then
  echo "failed commands:" && cat "$failed"
  rm -f "$failed"
  exit 1
fi
rm -f "$failed"
