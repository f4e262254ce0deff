#!/usr/bin/env bash
# Whether two commits generate the same kernels: dumps every wrapper and kernel source
# ember.inductor writes for the tools/bench workloads under each commit and diffs them.
#
#   bash tools/diff_kernels.sh BASE [HEAD [WORKLOAD ...]]     (HEAD "" or absent: the working tree)
#
# Three dumps per commit, by this checkout's tools/dump_kernels.py --untimed (its workloads,
# the commit's packages): C++ (ember.aotgrad's path),
# C++ without ember.aotgrad (aten_trace.py's inference path) and Triton under its
# interpreter. Exit 0 when all are byte-identical; the differences are printed otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VPY="${EMBER_VENV:-$ROOT/.venv}/bin/python"
BASE=$1
HEAD=${2:-}
WORKLOADS=("${@:3}")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

tree() {  # tree REV DIR: the commit's packages (the working tree's for an empty REV)
    mkdir -p "$2"
    if [ -z "$1" ]; then
        cp -r "$ROOT/packages" "$2/"
    else
        git archive "$1" packages | tar -x -C "$2"
    fi
}

dump() {  # dump DIR OUT
    local dir=$1 out=$2 pp
    pp=$(ls -d "$dir"/packages/*/src | tr '\n' ':')
    cd "$dir"
    PYTHONPATH=$pp TRITON_INTERPRET=1 "$VPY" "$ROOT/tools/dump_kernels.py" --untimed "$out/cpp" "${WORKLOADS[@]}" > /dev/null
    PYTHONPATH=$pp "$VPY" "$ROOT/tools/dump_kernels.py" --untimed --no-aotgrad "$out/noaot" "${WORKLOADS[@]}" > /dev/null
    PYTHONPATH=$pp TRITON_INTERPRET=1 "$VPY" "$ROOT/tools/dump_kernels.py" --untimed --options 'cpu_backend="triton"' \
        "$out/triton" "${WORKLOADS[@]}" > /dev/null
    cd "$ROOT"
}

tree "$BASE" "$WORK/a"
tree "$HEAD" "$WORK/b"
dump "$WORK/a" "$WORK/out-a"
dump "$WORK/b" "$WORK/out-b"
if diff -r "$WORK/out-a" "$WORK/out-b"; then
    echo "identical: $(find "$WORK/out-a" -type f | wc -l) files"
else
    exit 1
fi
