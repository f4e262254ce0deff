#!/usr/bin/env bash
# Issue 20's GPU checks as one script, for a lent GPU machine (Python 3.12, torch 2.11,
# triton 3.6, no network; see the device tool's README). Two halves:
#
#   bash tools/gpu_check.sh --prepare     # HERE: ember's six packages and the dependencies
#                                         # the GPU image lacks, as wheels in .whl/ (git-ignored
#                                         # through .git/info/exclude)
#   bash tools/gpu_check.sh [PART ...]    # THERE (device run, carry [".whl"]): installs the
#                                         # wheels under /tmp/site and runs the parts
#
# Parts (default: all, in this order; each writes its output under $OUT when set):
#   env      versions, nvidia-smi
#   opinfo   OpInfo's elementwise and reduction ops at float32 on CUDA tensors (Triton), vs eager
#   tests    test_cuda.py: models, ember.dynamo end to end, CUDA graphs (mode='reduce-overhead')
#   bench    tools/bench.py --device cuda: ember-inductor next to torch.compile's inductor
#   ro       tools/bench.py --device cuda: mode='reduce-overhead' (CUDA graphs) against default
#   bw       tools/bench_bandwidth.py: pointwise kernels against the copy bandwidth
#   direct   EMBER_TRITON_DIRECT_LAUNCH=1 (launches skipping JITFunction.run, off by default
#            until checked here): test_cuda.py, then the bench's many-kernel workloads
#   dynamic  symbolic sizes on CUDA (issue 32, ADR 0050; under 3 minutes on an H100):
#            test_cuda.py's symbolic tests (a GPT block at six lengths compiled at most twice
#            and equal to eager, inference and training; the reduction variants across the
#            persistent/looped boundary; the symbolic OpInfo sweep), then the bench's
#            gpt_block_6len row (six lengths in rotation) next to torch.compile (its
#            graphs/recomp columns: 1 + 1 recompile; 'beside': eager timed in the same process)
# GPU_CHECK_SAMPLES (default 2), GPU_CHECK_OPS (op names) and GPU_CHECK_WORKLOADS narrow the
# opinfo and bench parts; GPU_CHECK_REPEATS sets the bench's repeats (default 5);
# GPU_CHECK_TESTS_TIMEOUT and GPU_CHECK_OPINFO_TIMEOUT cap those parts (seconds).
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp/gpu_check_out}"
mkdir -p "$OUTDIR"

if [ "${1:-}" = "--prepare" ]; then
    set -e
    PY="${PYTHON:-python3}"
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"
    rm -rf .whl && mkdir -p .whl
    for p in ir guards dynamo aotgrad inductor minifier; do
        "$PY" -m pip wheel -q --no-deps -w .whl "packages/$p"
    done
    # ember's runtime dependencies that the GPU image does not hold (its package list:
    # the device tool's KINDS.md); pure-Python wheels, so any platform tag works
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp -d .whl "bytecode>=0.15" expecttest
    ls -la .whl
    exit 0
fi

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:tools${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
export EMBER_CACHE_DIR=/tmp/ember-cache
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(env tests opinfo bench ro bw dynamic)
status=0
for part in "${parts[@]}"; do
    echo "=== $part ($(date -u +%H:%M:%S))"
    case "$part" in
        env)
            nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
            python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())"
            python3 -c "import ember.inductor, ember.dynamo; print('ember imports')" || status=1
            ;;
        opinfo)
            timeout "${GPU_CHECK_OPINFO_TIMEOUT:-1200}" python3 packages/inductor/tests/test_opinfo.py --device cuda \
                --samples "${GPU_CHECK_SAMPLES:-2}" ${GPU_CHECK_OPS:-} 2>&1 | tee "$OUTDIR/opinfo_cuda.txt" | grep -E "^(FAIL|lowered and)" || status=1
            ;;
        tests)
            # compiled kernels, not Triton's interpreter (the Triton tests on CPU tensors run in
            # the default test command on every machine)
            TRITON_INTERPRET=0 timeout "${GPU_CHECK_TESTS_TIMEOUT:-900}" python3 -m pytest -q -p no:cacheprovider -p no:randomly \
                packages/inductor/tests/test_cuda.py 2>&1 | tee "$OUTDIR/cuda_tests.txt" \
                | grep -E "^(FAILED|ERROR|E  )|passed|failed" | head -60 || status=1
            ;;
        bench)
            python3 tools/bench.py --device cuda --no-warm --repeats "${GPU_CHECK_REPEATS:-5}" \
                --workloads "${GPU_CHECK_WORKLOADS:-pointwise,softmax,layernorm_gelu,mlp,mlp_train,encoder_layer,gpt_block,gpt_block_train,tiny_add}" \
                --compilers ember-inductor,torch-inductor --json "$OUTDIR/bench_cuda.json" 2>&1 \
                | tee "$OUTDIR/bench_cuda.txt" | tail -30 || status=1
            ;;
        ro)
            python3 tools/bench.py --device cuda --no-warm --repeats "${GPU_CHECK_REPEATS:-5}" \
                --workloads "${GPU_CHECK_RO_WORKLOADS:-tiny_add,mlp}" \
                --compilers ember-inductor,ember-inductor-ro,torch-inductor,torch-inductor-ro \
                --json "$OUTDIR/bench_ro.json" 2>&1 | tee "$OUTDIR/bench_ro.txt" | tail -20 || status=1
            ;;
        bw)
            python3 tools/bench_bandwidth.py --device cuda --torch 2>&1 | tee "$OUTDIR/bandwidth.txt" || status=1
            ;;
        direct)
            EMBER_TRITON_DIRECT_LAUNCH=1 TRITON_INTERPRET=0 timeout "${GPU_CHECK_TESTS_TIMEOUT:-900}" \
                python3 -m pytest -q -p no:cacheprovider -p no:randomly packages/inductor/tests/test_cuda.py \
                2>&1 | tee "$OUTDIR/cuda_tests_direct.txt" | grep -E "^(FAILED|ERROR|E  )|passed|failed" | head -60 || status=1
            EMBER_TRITON_DIRECT_LAUNCH=1 python3 tools/bench.py --device cuda --no-warm --repeats "${GPU_CHECK_REPEATS:-5}" \
                --workloads "${GPU_CHECK_DIRECT_WORKLOADS:-gpt_block_train,mlp_train,gpt_block,tiny_add}" \
                --compilers ember-inductor,torch-inductor --json "$OUTDIR/bench_direct.json" 2>&1 \
                | tee "$OUTDIR/bench_direct.txt" | tail -20 || status=1
            ;;
        dynamic)
            TRITON_INTERPRET=0 timeout "${GPU_CHECK_DYNAMIC_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider \
                -p no:randomly packages/inductor/tests/test_cuda.py -k "symbolic" 2>&1 \
                | tee "$OUTDIR/cuda_dynamic_tests.txt" | grep -E "^(FAILED|ERROR|E  )|passed|failed" | head -60 || status=1
            timeout "${GPU_CHECK_DYNAMIC_BENCH_TIMEOUT:-240}" python3 tools/bench.py --device cuda --no-warm \
                --repeats "${GPU_CHECK_REPEATS:-3}" --workloads gpt_block_6len --compilers ember-inductor,torch-inductor \
                --json "$OUTDIR/bench_dynamic.json" 2>&1 | tee "$OUTDIR/bench_dynamic.txt" | tail -20 || status=1
            ;;
        *)
            echo "unknown part: $part (env, opinfo, tests, bench, bw, ro, direct, dynamic)"
            status=2
            ;;
    esac
done
exit $status
