#!/usr/bin/env bash
# The GPU benchmarks in one command (about 8 minutes on one H100): correctness of every chunk kernel on CUDA, then
# the output-layer tables in float32 and under autocast bf16, at N=4096 H=512 V=50k and at the Gemma-sized
# N=8192 H=2304 V=256k, written to docs/results/gpu_<device>.md (or $OUT/ when set) with the device named.
#
#   bash benchmarks/gpu.sh                   # on a machine with a CUDA GPU and PyTorch
#
# Wheels in .whl/ (liger-kernel, cut-cross-entropy, ...) are installed first when present (no network needed).
set -euo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
device=$(python3 -c "import torch; print(torch.cuda.get_device_name(0).replace(' ', '-'))")
out=${OUT:-docs/results}/gpu_${device}.md
{
  echo "# GPU benchmarks on ${device}"
  echo
  echo "\`bash benchmarks/gpu.sh\` ($(date -u +%F)); $(python3 -c 'import torch; print("torch", torch.__version__)')"
  echo
  echo '## Correctness of every chunk kernel on CUDA (`python benchmarks/gpu_check.py`)'
  echo '```'
  python3 benchmarks/gpu_check.py --device cuda || true
  echo '```'
  for amp in "" "--autocast bf16"; do
    for size in "--tokens 4096 --hidden 512 --vocab 50000" "--tokens 8192 --hidden 2304 --vocab 256000"; do
      echo
      echo "## \`python benchmarks/bench_margin.py --device cuda --repeats 5 ${size} ${amp}\`"
      echo '```'
      timeout 150 python3 benchmarks/bench_margin.py --device cuda --repeats 5 ${size} ${amp} \
        --methods "naive logits" "hf_heads softmax" "hf_heads arc+log-unigram+max-norm" "hf_heads lsm" \
        "torch F.linear" || echo "(stopped: over 150 s)"
      echo '```'
    done
  done
} 2>&1 | tee "$out"
echo "written: $out"
