#!/bin/bash
# Every CUDA path of date_engine in one command, ≤ 8 minutes on one GPU, with a short markdown
# report (device, torch, CUDA; each check's result, seconds and, where it failed, its last lines):
#
#   bash benchmarks/gpu_check.sh [REPORT]      (default docs/results/gpu_check.md; run from anywhere)
#
# The checks: the tests marked `cuda`; `date scale` of lenet-mnist and vit-mnist for a few hundred
# steps in fp32, bf16 and fp16 (GradScaler), under torchrun on every GPU (NCCL from 2 GPUs on; on
# one GPU, 2 processes on gloo exercise DDP on CUDA tensors instead); `--parallel fsdp` with its
# mixed-precision policy; `--compile`; a checkpoint written on the GPU resumed on the CPU; the
# optimizer step against torch's fused Adam, AdamW and SGD on the GPU; `date bench` on the GPU.
# Every check runs under a time limit, so one hang cannot take the machine's whole lease.
#
# On a machine without CUDA it says so and exits 0 at once. A GPU machine without the package
# index: first, here, `bash benchmarks/gpu_check.sh --prepare` writes .gpu/ (the wheels the GPU
# image may lack: pydantic and its parts) and MNIST must be in data/mnist (date data prepare mnist
# data/mnist); carry both (.gpu, data/mnist) to the GPU machine.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}

if [ "${1:-}" = "--prepare" ]; then
    mkdir -p .gpu/whl
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .gpu/whl pydantic==2.14.4 pydantic_core==2.50.5 \
        annotated-types==0.8.0 typing-inspection==0.4.5 || exit 1
    [ -f data/mnist/train-images-idx3-ubyte ] || [ -f data/mnist/train-images-idx3-ubyte.gz ] ||
        echo "note: data/mnist is missing: date data prepare mnist data/mnist, then carry it."
    echo "wrote .gpu/whl; carry .gpu and data/mnist to the GPU machine"
    exit 0
fi

GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null || echo 0)
if [ "$GPUS" = "0" ]; then
    echo "gpu_check: skipped: no CUDA device on this machine (torch: $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not importable')); run it on a GPU machine."
    exit 0
fi

REPORT=$(realpath -m "${1:-docs/results/gpu_check.md}")
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
mkdir -p "$(dirname "$REPORT")"
if ! "$PY" -c "import pydantic" 2>/dev/null && [ -d .gpu/whl ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" .gpu/whl/*.whl
    export PYTHONPATH="$WORK/site"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! MISSING=$("$PY" - 2>&1 <<'PY'
import importlib.util, sys
missing = [m for m in ("pydantic", "typer", "rich", "yaml", "sklearn", "pytest")
           if importlib.util.find_spec(m) is None]
print(", ".join(missing))
sys.exit(1 if missing else 0)
PY
); then
    echo "gpu_check: this machine's Python lacks $MISSING; run bash benchmarks/gpu_check.sh --prepare where pip works and carry .gpu here."
    exit 1
fi
DATE=("$PY" -m date_engine)
MNIST="--set train.data_dir=$ROOT/data/mnist"
LOG_SET="--set train.log_every=50 --set train.eval_every=100"
START=$(date +%s)
FAILED=0
{
    echo "# GPU check"
    echo
    echo "Command: \`bash benchmarks/gpu_check.sh\`, $(date -u +%Y-%m-%d), date_engine $("$PY" -c 'import date_engine; print(date_engine.__version__)') ($(git rev-parse --short HEAD 2>/dev/null || echo 'commit unknown')). Machine: $("$PY" - <<'PY'
import torch
p = torch.cuda.get_device_properties(0)
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
except Exception:  # a build without NCCL
    nccl = "none"
print(f"{torch.cuda.device_count()} × {p.name} ({p.total_memory / 2**30:.0f} GiB), torch "
      f"{torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}")
PY
)."
    echo
    echo "| check | result | seconds |"
    echo "|---|---|---:|"
} > "$REPORT"
: > "$WORK/failures.md"

# check NAME LIMIT_SECONDS COMMAND...: run it, a row in the report; its log's end where it failed
N=0
check() {
    local name=$1 limit=$2; shift 2
    local began=$SECONDS
    N=$((N + 1)); LOG="$WORK/check-$N.log"
    timeout "$limit" "$@" > "$LOG" 2>&1
    local rc=$? took=$((SECONDS - began))
    local result="ok"
    if [ $rc -eq 124 ]; then result="FAILED: over ${limit} s"; elif [ $rc -ne 0 ]; then result="FAILED: exit $rc"; fi
    echo "| $name | $result | $took |" >> "$REPORT"
    echo "$name: $result ($took s)"
    if [ "$result" != "ok" ]; then
        FAILED=$((FAILED + 1))
        { echo; echo "### $name"; echo; echo '```'; tail -n 15 "$LOG"; echo '```'; } >> "$WORK/failures.md"
    fi
}

# the processes of a multi-process check: every GPU under NCCL, or 2 on gloo on a single GPU
if [ "$GPUS" -ge 2 ]; then MULTI=(--nproc "$GPUS"); WHERE="$GPUS processes, NCCL"
else MULTI=(--nproc 2 --backend gloo); WHERE="2 processes on 1 GPU, gloo (NCCL needs 2 GPUs)"; fi
echo "multi-process checks: $WHERE" > "$WORK/where.txt"

check "pytest -m cuda" 240 "$PY" -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda.py
for precision in fp32 bf16 fp16; do
    check "lenet-mnist $precision, 1 process" 90 "${DATE[@]}" scale recipes/lenet-mnist.yaml \
        --batch 1024 --max-steps 300 --precision "$precision" $MNIST $LOG_SET -o "$WORK/lenet-$precision"
done
check "lenet-mnist bf16, $WHERE" 120 "${DATE[@]}" scale recipes/lenet-mnist.yaml --batch 1024 \
    --max-steps 300 --precision bf16 "${MULTI[@]}" $MNIST $LOG_SET -o "$WORK/lenet-ddp"
for precision in fp32 bf16; do
    check "vit-mnist $precision, 1 process" 120 "${DATE[@]}" scale recipes/vit-mnist.yaml \
        --batch 1024 --max-steps 200 --precision "$precision" $MNIST $LOG_SET -o "$WORK/vit-$precision"
done
check "vit-mnist fp16, $WHERE" 120 "${DATE[@]}" scale recipes/vit-mnist.yaml --batch 1024 \
    --max-steps 200 --precision fp16 "${MULTI[@]}" $MNIST $LOG_SET -o "$WORK/vit-ddp"
check "vit-mnist fsdp bf16, $WHERE" 120 "${DATE[@]}" scale recipes/vit-mnist.yaml --batch 1024 \
    --max-steps 200 --precision bf16 --parallel fsdp "${MULTI[@]}" $MNIST $LOG_SET -o "$WORK/vit-fsdp"
check "vit-mnist --compile" 180 "${DATE[@]}" scale recipes/vit-mnist.yaml --batch 1024 \
    --max-steps 100 --compile $MNIST $LOG_SET -o "$WORK/vit-compile"
check "checkpoint on the GPU" 90 "${DATE[@]}" scale recipes/lenet-mnist.yaml --batch 1024 \
    --max-steps 100 --set train.checkpoint_every=50 $MNIST -o "$WORK/moved"
check "resumed on the CPU" 180 env CUDA_VISIBLE_DEVICES= "${DATE[@]}" scale \
    recipes/lenet-mnist.yaml --batch 1024 --max-steps 120 --resume --set train.checkpoint_every=50 \
    $MNIST -o "$WORK/moved"
check "optimizer step (ResNet-50 shapes)" 150 "$PY" benchmarks/optimizer_step.py --device cuda \
    --steps 20 --warmup 5 --out "$WORK/optimizer_step.json"
STEP_LOG=$LOG
check "date bench" 120 "${DATE[@]}" bench recipes/lenet-mnist.yaml --nproc 1 $MNIST -o "$WORK/bench"

{
    echo
    cat "$WORK/where.txt"
    echo
    if [ -f "$WORK/optimizer_step.json" ]; then
        echo "Optimizer step on the GPU (median ms; ratio to torch's fused step):"
        echo
        echo '```'
        grep -E "^(One step|optimizer|DATE|LARS|LAMB|Adam|AdamW|SGD|RMSprop)" "$STEP_LOG"
        echo '```'
    fi
    if [ -f "$WORK/bench/bench.json" ]; then
        echo
        echo "date bench on the GPU: $("$PY" -c "
import json; b = json.load(open('$WORK/bench/bench.json'))
print(f\"T_c(b) = {b['compute_fixed'] * 1e3:.3f} ms + {b['compute_per_sample'] * 1e6:.3f} µs·b, \"
      f\"optimizer step {b['optimizer_seconds'] * 1e3:.3f} ms, device {b['device']}\")")"
    fi
    echo
    echo "$FAILED check(s) failed; $(( $(date +%s) - START )) s in all."
    cat "$WORK/failures.md"
} >> "$REPORT"
echo "gpu_check: $FAILED failed; report: $REPORT (logs in $WORK)"
exit $(( FAILED > 0 ))
