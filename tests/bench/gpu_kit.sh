#!/usr/bin/env bash
# The kit for a session lent a GPU machine (the `device` tool): that machine has torch, triton,
# prometheus-client, psutil, nvidia-ml-py, hypothesis and onnxruntime, but not APScheduler, grafanalib,
# bcrypt, plotly or Prometheus, and it cannot download anything. Device time is short (30 minutes a
# session, 10 a command), so everything it needs is fetched here beforehand, and each step there is
# one command.
#
#   tests/bench/gpu_kit.sh prepare          # here, with the network: wheels and Prometheus's .deb into .whl/
#   . tests/bench/gpu_kit.sh setup          # there, first in every command (sourced): install them, set paths
#   tests/bench/gpu_kit.sh versions         # there: the versions docs/BENCHMARKS.md names, one per line
#
# The device calls themselves, each with carry [".whl"] (docs/BENCHMARKS.md, "A GPU session"):
#   1. . tests/bench/gpu_kit.sh setup && tests/bench/gpu_kit.sh versions | tee $OUT/versions.txt &&
#      python -m pytest -rs tests/test_gpu.py 2>&1 | tee $OUT/test_gpu.log
#   2. . tests/bench/gpu_kit.sh setup && tests/bench/gpu_kit.sh quick $OUT
#   3. . tests/bench/gpu_kit.sh setup && python tests/bench/gpu_bench.py all --out $OUT
# Options only when run, not when sourced: they would stay set in the caller's shell.
[ "${BASH_SOURCE[0]}" = "$0" ] && set -uo pipefail

KIT_DIR=".whl"
# Exact versions: the ones the development machine's tests pass with; one of each, or pip stops.
KIT_WHEELS=(
    "APScheduler==3.11.3" "tzlocal==5.4.5" "grafanalib==0.7.1" "bcrypt==5.0.0" "plotly==7.1.0"
    "narwhals==2.29.0" "grafana-foundation-sdk==0.0.21"
)

kit_prepare() {
    mkdir -p "$KIT_DIR"
    grep -qx '/.whl/' .gitignore 2>/dev/null || echo "warning: .whl/ is not in .gitignore" >&2
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_34_x86_64 --platform any -d "$KIT_DIR" "${KIT_WHEELS[@]}" || return 1
    # promtool and prometheus for the scrape check and the test suite's Prometheus tests (19 MB).
    (cd "$KIT_DIR" && rm -f prometheus_*.deb && apt-get download prometheus >/dev/null) || return 1
    du -sh "$KIT_DIR"
    ls "$KIT_DIR"
}

kit_setup() {
    [ -d "$KIT_DIR" ] || { echo "no $KIT_DIR here: run 'tests/bench/gpu_kit.sh prepare' on the development machine and carry .whl" >&2; return 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$KIT_DIR"/*.whl || return 1
    if ! command -v promtool >/dev/null 2>&1; then
        for deb in "$KIT_DIR"/prometheus_*.deb; do dpkg-deb -x "$deb" /tmp/prom; done
        export PATH="/tmp/prom/usr/bin:$PATH"
    fi
    # This checkout laid out as the wheel installs it (the package `sixdim`, from agent/, workloads/,
    # collectors/ and dashboards/; nothing can be pip-installed there), then the repository root for
    # `tests`, then the kit's packages.
    rm -rf /tmp/kit-src && python3 -m tests.static_checks lay-out /tmp/kit-src || return 1
    export PYTHONPATH="/tmp/kit-src:$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    # `sixdim` as a command, as the README's install gives it.
    mkdir -p /tmp/kit-bin
    printf '#!/bin/sh\nexec python3 -m sixdim "$@"\n' > /tmp/kit-bin/sixdim && chmod +x /tmp/kit-bin/sixdim
    export PATH="/tmp/kit-bin:$PATH"
}

kit_versions() {
    nvidia-smi --query-gpu=name,driver_version,vbios_version,power.limit,clocks.max.sm --format=csv,noheader
    python3 - <<'EOF'
import platform, torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda)
print("cudnn", torch.backends.cudnn.version())
print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
try:
    import triton; print("triton", triton.__version__)
except Exception as exc: print("triton", "absent:", exc)
try:
    import onnxruntime as ort; print("onnxruntime", ort.__version__, ort.get_available_providers())
except Exception as exc: print("onnxruntime", "absent:", exc)
EOF
}

# The quick suite with sixdim's default timing (its wall time is what issue 14 asks), then a
# 3-minute `sixdim serve` scraped every 15 s, with the last scrape checked by promtool.
kit_quick() {
    local out="${1:?usage: gpu_kit.sh quick OUTDIR}" state
    state="$(mktemp -d)"
    local started=$SECONDS
    SIXDIM_HISTORY="$state/history.db" SIXDIM_STATE_DIR="$state/state" \
        sixdim run --suite quick --json > "$out/quick.json" 2> "$out/quick.stderr"
    echo "quick suite: exit $?, $((SECONDS - started)) s wall"
    SIXDIM_HISTORY="$state/history.db" SIXDIM_STATE_DIR="$state/state" \
        sixdim serve --listen 127.0.0.1:9480 > "$out/serve.log" 2>&1 &
    local agent=$!
    for _ in $(seq 12); do
        sleep 15
        python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen("http://127.0.0.1:9480/metrics", timeout=10).read())' > "$out/metrics.txt"
        nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader >> "$out/compute_apps.txt"
        ps -o pid=,rss=,pcpu= -p "$agent" >> "$out/agent_ps.txt"
    done
    promtool check metrics < "$out/metrics.txt" > "$out/promtool.txt" 2>&1
    echo "promtool check metrics: exit $? ($(wc -l < "$out/promtool.txt") lines of findings)"
    kill -TERM "$agent"; wait "$agent"
    echo "serve: exit $?; the agent's PID was $agent (it must not appear in compute_apps.txt)"
}

case "${1:-}" in
    prepare) kit_prepare ;;
    setup) kit_setup ;;
    versions) kit_versions ;;
    quick) shift; kit_quick "$@" ;;
    *) sed -n '2,16p' "${BASH_SOURCE[0]}"; [ "${BASH_SOURCE[0]}" = "$0" ] && exit 2 ;;
esac
