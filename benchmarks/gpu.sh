#!/usr/bin/env bash
# The GPU benchmarks in one command of under 10 minutes: correctness of every chunk kernel and every family's head on
# CUDA (with the CUDA sync debug mode on a training step), then the output-layer tables of every family in float32 and
# under autocast bf16 (margin / softmax, sparse and sampled at N=4096 H=512 V=50k and at the Gemma-sized N=8192 H=2304 V=256k), written to docs/results/gpu_<device>.md (or $OUT/ when set) with the device named.
# Each section gets what is left of a 9-minute budget (GPU_BUDGET_S); a section cut short says so in the file.
#
#   python -m pip download --no-deps -d .whl liger-kernel cut-cross-entropy    # beside the repository, once
#   python -m pip download --no-deps -d .whl transformers==5.23.0     # where the GPU machine's transformers is older
#   bash benchmarks/gpu.sh                   # on a machine with a CUDA GPU and PyTorch
#
# Wheels in .whl/ (liger-kernel, cut-cross-entropy, ...) are installed first when present (no network needed): their
# fused linear cross-entropy then gets a row in the margin tables.
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
# every row in one process per table (no Python start per row): on CUDA the allocator's peak is reset per row
export HF_HEADS_BENCH_IN_PROCESS=1
device=$(python3 -c "import torch; print(torch.cuda.get_device_name(0).replace(' ', '-'))")
out=${OUT:-docs/results}/gpu_${device}.md
progress=${OUT:-/tmp}/gpu_${device}_progress.log  # each row as it is measured: what a section cut short had
deadline=$(( $(date +%s) + ${GPU_BUDGET_S:-540} ))

# run SECONDS CMD...: the command with at most SECONDS (and never past the deadline), noted when stopped
run() {
  local limit=$1 left=$(( deadline - $(date +%s) ))
  shift
  (( left < limit )) && limit=$left
  if (( limit < 10 )); then echo "(not run: the time budget is spent)"; return; fi
  echo "## $(date -u +%T) (limit ${limit} s) $*" >>"$progress"
  timeout "$limit" "$@" 2>>"$progress" || echo "(stopped after ${limit} s, or failed: exit $?; rows measured so far: ${progress##*/})"
}

MARGIN_METHODS=("naive logits" "three matmuls" "hf_heads softmax" "hf_heads arc+log-unigram+max-norm" "hf_heads lsm"
  "torch F.linear" "Liger-Kernel" "Cut Cross-Entropy")
{
  echo "# GPU benchmarks on ${device}"
  echo
  echo "\`bash benchmarks/gpu.sh\` ($(date -u +%F)); $(python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)')"
  echo
  echo '## Correctness of every chunk kernel and every head on CUDA (`python benchmarks/gpu_check.py`)'
  echo '```'
  run 100 python3 benchmarks/gpu_check.py --device cuda
  echo '```'
  for amp in "" "--autocast bf16"; do
    # the Gemma-sized row leaves out the compiled kernels (their compile time would eat the budget)
    for size in "80 --tokens 4096 --hidden 512 --vocab 50000" "70 --tokens 8192 --hidden 2304 --vocab 256000 --exclude compiled"; do
      limit=${size%% *} size=${size#* } shape=${size% --exclude*}
      echo
      echo "## \`python benchmarks/bench_margin.py --device cuda --repeats 5 ${size} ${amp}\`"
      echo '```'
      run "$limit" python3 benchmarks/bench_margin.py --device cuda --repeats 5 ${size} ${amp} --methods "${MARGIN_METHODS[@]}"
      echo '```'
      echo
      echo "## \`python benchmarks/bench_sparse.py --device cuda --repeats 5 ${shape} ${amp}\`"
      echo '```'
      run 40 python3 benchmarks/bench_sparse.py --device cuda --repeats 5 ${shape} ${amp}
      echo '```'
      echo
      echo "## \`python benchmarks/bench_sampled.py --device cuda --repeats 5 --modes 'output layer' ${shape} ${amp}\`"
      echo '```'
      run "$(( limit + 20 ))" python3 benchmarks/bench_sampled.py --device cuda --repeats 5 --modes "output layer" ${shape} ${amp}
      echo '```'
    done
  done
} 2>&1 | tee "$out"
echo "written: $out (rows as measured: $progress)"
