#!/usr/bin/env bash
# The kit for a session lent a GPU machine (the `device` tool): that machine has torch, triton,
# prometheus-client, psutil, nvidia-ml-py, hypothesis and onnxruntime under its own `python3` (a plain
# `python` may be another one), but not APScheduler, grafanalib, bcrypt, plotly or Prometheus, and it
# cannot download anything. Device time is short (15 minutes a session on 2026-11-26, 10 a command), so everything it
# needs is fetched here beforehand, and every step there ends on its own time budget (--budget-seconds,
# a default for each) well inside a command's 10 minutes, keeping what it did by then.
#
#   tests/bench/gpu_kit.sh prepare            # here, with the network: wheels and Prometheus's .deb into .whl/
#   . tests/bench/gpu_kit.sh setup            # there, first in every command (sourced): install them, set paths
#   tests/bench/gpu_kit.sh versions           # there: the versions docs/BENCHMARKS.md names, one per line
#   tests/bench/gpu_kit.sh tests OUT [--budget-seconds 270]       # every test marked gpu (pytest -m gpu)
#   tests/bench/gpu_kit.sh quick-run OUT [--budget-seconds 300]   # sixdim run --suite quick --json, timed
#   tests/bench/gpu_kit.sh serve OUT [--budget-seconds 200]       # sixdim serve, scraped every 15 s, promtool
#   tests/bench/gpu_kit.sh quick OUT          # quick-run, then serve on its history
#   tests/bench/gpu_kit.sh tiers OUT [--budget-seconds 240]       # the frequent and power tiers: device s per run
#   tests/bench/gpu_kit.sh bench OUT [--budget-seconds 420] [--only a,b]   # tests/bench/gpu_bench.py all
#   tests/bench/gpu_kit.sh proof OUT [--budget-seconds 480]       # issue 45's one GPU proof (8 minutes, below)
#
# The device calls themselves, each with carry [".whl"], are in docs/BENCHMARKS.md ("A GPU session").
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
try:
    print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
except Exception as exc: print("nccl", "absent:", exc)
try:
    import triton; print("triton", triton.__version__)
except Exception as exc: print("triton", "absent:", exc)
try:
    import onnxruntime as ort; print("onnxruntime", ort.__version__, ort.get_available_providers())
except Exception as exc: print("onnxruntime", "absent:", exc)
EOF
}

# A step's budget: --budget-seconds N after its other arguments, else the step's default.
kit_budget() {
    local default="$1"; shift
    while [ $# -gt 0 ]; do
        [ "$1" = "--budget-seconds" ] && { echo "${2:?--budget-seconds needs a number}"; return; }
        shift
    done
    echo "$default"
}

# Where quick-run leaves its history for serve (the same machine, a later command of the same lease).
KIT_STATE=/tmp/sixdim-kit

# Every test marked gpu, under `timeout` so that a hang ends the step (SIGINT first: pytest still
# prints what passed and failed by then).
kit_tests() {
    local out="${1:?usage: gpu_kit.sh tests OUTDIR [--budget-seconds N]}" budget
    budget="$(kit_budget 270 "$@")"
    timeout -s INT -k 15 "$budget" python3 -m pytest -rs --durations=20 -m gpu -p no:cacheprovider \
        --continue-on-collection-errors tests/ 2>&1 | tee "$out/test_gpu.log"
    echo "gpu tests: exit ${PIPESTATUS[0]} (budget $budget s; 124 = the budget ran out)"
}

# The quick suite with sixdim's default timing: its wall time is what issue 23 asks.
kit_quick_run() {
    local out="${1:?usage: gpu_kit.sh quick-run OUTDIR [--budget-seconds N]}" budget started=$SECONDS
    budget="$(kit_budget 300 "$@")"
    mkdir -p "$KIT_STATE"
    SIXDIM_HISTORY="$KIT_STATE/history.db" SIXDIM_STATE_DIR="$KIT_STATE/state" \
        timeout -s TERM -k 15 "$budget" sixdim run --suite quick --json > "$out/quick.json" 2> "$out/quick.stderr"
    echo "quick suite: exit $?, $((SECONDS - started)) s wall (budget $budget s; 124 = the budget ran out)"
}

# The default schedule's frequent and power tiers (issue 41), each run as the daemon runs it (a fresh worker,
# `sixdim run --suite NAME --json`): the frequent tier twice (its spread), the power tier once, each within
# its share of the budget.  tests/bench/tier_cost.py then prints each run's device time (the sum of its
# cases' case_wall spans: the worker's start-up is not device work) and the share of an hour it takes at
# agent/default.toml's intervals; with OUT/quick.json from quick-run beside them, the quick suite's too.
kit_tiers() {
    local out="${1:?usage: gpu_kit.sh tiers OUTDIR [--budget-seconds N]}" budget started=$SECONDS run
    budget="$(kit_budget 240 "$@")"
    mkdir -p "$KIT_STATE"
    local runs=(frequent:1 frequent:2 power:1) files=() left each
    for run in "${runs[@]}"; do
        left=$((budget - (SECONDS - started))); each=$((left / 2)); [ "$run" = power:1 ] && each=$left
        [ "$each" -ge 20 ] || { echo "tiers: $run skipped, $left s of the budget left"; continue; }
        SIXDIM_HISTORY="$KIT_STATE/history.db" SIXDIM_STATE_DIR="$KIT_STATE/state" \
            timeout -s TERM -k 15 "$each" sixdim run --suite "${run%%:*}" --json \
            > "$out/tier-${run/:/-}.json" 2> "$out/tier-${run/:/-}.stderr"
        echo "tiers: $run exit $?, $((SECONDS - started)) s into the step (budget $budget s; 124 = its share ran out)"
        files+=("$out/tier-${run/:/-}.json")
    done
    [ -s "$out/quick.json" ] && files+=("$out/quick.json")
    python3 tests/bench/tier_cost.py --schedule agent/default.toml "${files[@]}" | tee "$out/tiers.txt"
}

# `sixdim serve` (which runs the quick suite at once, on its own schedule) scraped every 15 s for the
# budget less 20 s; the last scrape is checked by promtool; the agent's memory, CPU and the GPU's
# compute processes are read at each scrape (the agent's PID must never be among the latter).
kit_serve() {
    local out="${1:?usage: gpu_kit.sh serve OUTDIR [--budget-seconds N]}" budget scrapes
    budget="$(kit_budget 200 "$@")"
    scrapes=$(( (budget - 20) / 15 )); [ "$scrapes" -ge 1 ] || scrapes=1
    mkdir -p "$KIT_STATE"
    SIXDIM_HISTORY="$KIT_STATE/history.db" SIXDIM_STATE_DIR="$KIT_STATE/state" \
        sixdim serve --listen 127.0.0.1:9480 > "$out/serve.log" 2>&1 &
    local agent=$!
    for _ in $(seq "$scrapes"); do
        sleep 15
        python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen("http://127.0.0.1:9480/metrics", timeout=10).read())' > "$out/metrics.txt"
        echo "$(date +%s) $(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tr '\n' ';')" >> "$out/compute_apps.txt"
        echo "$(date +%s) $(ps -o pid=,rss=,pcpu=,cputime= -p "$agent")" >> "$out/agent_ps.txt"
    done
    promtool check metrics < "$out/metrics.txt" > "$out/promtool.txt" 2>&1
    echo "promtool check metrics: exit $? ($(wc -l < "$out/promtool.txt") lines of findings)"
    kill -TERM "$agent"; wait "$agent"
    echo "serve: exit $?, $scrapes scrapes; the agent's PID was $agent (it must not appear in compute_apps.txt)"
    if grep -Eq "(^| |;)$agent," "$out/compute_apps.txt"; then echo "serve: the agent held a CUDA context"; fi
}

kit_bench() {
    local out="${1:?usage: gpu_kit.sh bench OUTDIR [--budget-seconds N] [--only a,b]}" budget only=()
    budget="$(kit_budget 420 "$@")"
    shift
    while [ $# -gt 0 ]; do [ "$1" = "--only" ] && only=(--only "$2"); shift; done
    timeout -s TERM -k 30 "$((budget + 90))" python3 tests/bench/gpu_bench.py all --out "$out" \
        --budget-seconds "$budget" "${only[@]}"
    echo "bench: exit $? (budget $budget s)"
}

# The one GPU proof (issue 45), within 8 minutes on an H200-class GPU: onnxruntime-gpu where the machine can
# install it (the lent machines cannot download: a try that fails in seconds), the GPU test set with -s (each
# power phase prints its busy share beside its NVML utilization sample count) less the quick suite's 90 s test
# (proved on the H200 on 2026-11-26; nothing it checks beyond its sibling tests changed since), the
# convolution memory bench (sixdim against a hand measurement), then the model rows still owed
# (gpu_bench.py models --skip 3: those the H200 run did not reach) with what is left.  Records go to
# OUT/records (SIXDIM_GPU_RESULTS_DIR) and every step's output to OUT/proof.log; one archive, OUT/proof.tgz,
# holds them all (a call brings back at most 8 files).
PROOF_PROVEN=(
    "tests/test_gpu.py::test_quick_suite_reports_every_kernel_with_its_timing_method_and_cache_regime"
)
kit_proof() {
    local out="${1:?usage: gpu_kit.sh proof OUTDIR [--budget-seconds N]}" budget started=$SECONDS left
    budget="$(kit_budget 480 "$@")"
    mkdir -p "$out/records"
    export SIXDIM_GPU_RESULTS_DIR="$out/records"
    {
        echo "proof: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), budget $budget s"
        kit_versions
        if python3 -c 'import onnxruntime as o, sys; sys.exit("CUDAExecutionProvider" not in o.get_available_providers())' 2>/dev/null; then
            echo "onnxruntime: the machine's own has the CUDA provider"
        elif timeout 60 python3 -m pip install -q --retries 0 --timeout 5 --no-deps --target /tmp/ort-gpu onnxruntime-gpu 2>&1 | tail -2; [ -d /tmp/ort-gpu/onnxruntime ]; then
            export PYTHONPATH="/tmp/ort-gpu${PYTHONPATH:+:$PYTHONPATH}"
            echo "onnxruntime-gpu installed: $(python3 -c 'import onnxruntime as o; print(o.__version__, o.get_available_providers())')"
        else
            echo "onnxruntime-gpu: not installable here (no network?): the ONNX GPU tests skip with their reason"
        fi
        local deselect=() test
        for test in "${PROOF_PROVEN[@]}"; do deselect+=(--deselect "$test"); done
        left=$((budget - (SECONDS - started) - 200))
        timeout -s INT -k 15 "$left" python3 -m pytest -rs -s --durations=20 -m gpu -p no:cacheprovider \
            --continue-on-collection-errors "${deselect[@]}" tests/
        echo "proof: gpu tests exit $? at $((SECONDS - started)) s (their share $left s; 124 = it ran out)"
        timeout 90 python3 tests/bench/gpu_bench.py memory --out "$out" --budget-seconds 40 --workload conv
        echo "proof: conv memory exit $? at $((SECONDS - started)) s"
        left=$((budget - (SECONDS - started) - 10))
        if [ "$left" -ge 30 ]; then
            timeout -s TERM -k 15 "$((left + 30))" python3 tests/bench/gpu_bench.py models --out "$out" \
                --budget-seconds "$left" --skip 3
            echo "proof: models exit $? at $((SECONDS - started)) s"
        else
            echo "proof: models skipped, $left s of the budget left"
        fi
    } 2>&1 | tee "$out/proof.log"
    (cd "$out" && tar czf proof.tgz --exclude proof.tgz . 2>/dev/null)
    echo "proof: $((SECONDS - started)) s in all; $out/proof.tgz"
}

case "${1:-}" in
    prepare) kit_prepare ;;
    setup) kit_setup ;;
    versions) kit_versions ;;
    tests) shift; kit_tests "$@" ;;
    quick-run) shift; kit_quick_run "$@" ;;
    serve) shift; kit_serve "$@" ;;
    quick) shift; kit_quick_run "$@" && kit_serve "$@" ;;
    tiers) shift; kit_tiers "$@" ;;
    bench) shift; kit_bench "$@" ;;
    proof) shift; kit_proof "$@" ;;
    *) sed -n '2,24p' "${BASH_SOURCE[0]}"; [ "${BASH_SOURCE[0]}" = "$0" ] && exit 2 ;;
esac
