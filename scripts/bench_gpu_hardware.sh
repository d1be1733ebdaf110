#!/usr/bin/env bash
# The native GPU benchmark on a machine with a hardware GPU, in one run:
#   1. the Llama-3.2-1B- and Llama-3-8B-shaped random checkpoints are written if missing
#      (scripts/make_big_models.py on all cores, into $BIG_MODELS);
#   2. examples/bench_gpu on each: the GPU's two kernels (native f64, f32 pairs) and the CPU side
#      by side, stage by stage (Grams, layer products, the whole per-layer stage), with FLOP
#      counts, FLOP/s, each stage's heap peak (what the process's own code holds, apart from
#      the driver) and how far the backends' fingerprints are apart, one JSON line per model;
#   3. the CLI end to end on Llama-3-8B with --backend gpu, as a user runs it: wall time, peak
#      RSS and the backend the JSON records;
#   4. examples/bench_probe on Llama-3.2-1B: the induction probe (8 sequences of 2 x 256 + 1
#      tokens) on the GPU, then with first copies of 64 tokens on the GPU and the CPU side by
#      side, with FLOP counts, bytes moved and how far the scores are apart.
# It prints the GPU, driver and CPU first, and stops at once if wgpu finds no hardware adapter.
#
# Usage: scripts/bench_gpu_hardware.sh [BIN_DIR]
#   BIN_DIR holds prebuilt `headprint`, `bench_gpu` and `bench_probe` binaries (for a machine
#   without Rust), and the Vulkan loader `libvulkan.so.1` where that machine lacks one; without
#   it they are built here. BIG_MODELS (default /tmp/headprint-big) and PYTHON (a
#   python3 with numpy) can be set; SOFTWARE_GPU=1 runs on a software adapter (a dry run).
#        scripts/bench_gpu_hardware.sh --prepare BIN_DIR
#   builds those binaries and `gpu_kernels` here, stripped, into BIN_DIR with this machine's
#   Vulkan loader beside them: the folder to carry to a machine with a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --prepare ]; then
  out=${2:?"--prepare needs a folder"}
  cargo build --release --bin headprint --example bench_gpu --example bench_probe --example gpu_kernels
  mkdir -p "$out"
  for binary in headprint examples/bench_gpu examples/bench_probe examples/gpu_kernels; do
    cp "target/release/$binary" "$out/"
    strip "$out/$(basename "$binary")"
  done
  cp -L "$(ldconfig -p | sed -n 's/.*libvulkan.so.1 .*=> //p' | head -1)" "$out/libvulkan.so.1"
  du -sh "$out"
  exit 0
fi
if [ -n "${1:-}" ]; then
  headprint=$1/headprint bench=$1/bench_gpu probe=$1/bench_probe
else
  cargo build --release --bin headprint --example bench_gpu --example bench_probe
  headprint=target/release/headprint bench=target/release/examples/bench_gpu probe=target/release/examples/bench_probe
fi
dir=${BIG_MODELS:-/tmp/headprint-big}
python=${PYTHON:-python3}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
grep -m1 'model name' /proc/cpuinfo || true
echo "cores: $(nproc)"

# wgpu reaches an NVIDIA GPU through Vulkan: the loader (libvulkan.so.1) and the driver's ICD
# manifest. A CUDA-only image may have the driver's Vulkan library (libGLX_nvidia.so.0) but
# neither of those: the loader can come from BIN_DIR (copied from a Debian machine's
# libvulkan1), and the manifest is written here when the driver's library is found.
have_loader() { ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1'; }
if ! have_loader && [ -n "${1:-}" ] && [ -f "$1/libvulkan.so.1" ]; then
  export LD_LIBRARY_PATH=$(cd "$1" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "vulkan: the loader from $1"
fi
manifests=$(ls /usr/share/vulkan/icd.d/*nvidia* /etc/vulkan/icd.d/*nvidia* 2>/dev/null || true)
if [ -z "$manifests" ] && [ -z "${VK_ICD_FILENAMES:-}" ]; then
  driver=$(ldconfig -p 2>/dev/null | sed -n 's/.*libGLX_nvidia.so.0 .*=> //p' | head -1 || true)
  [ -n "$driver" ] || driver=$(find /usr/local/nvidia /usr/lib/x86_64-linux-gnu -name 'libGLX_nvidia.so.0' 2>/dev/null | head -1 || true)
  if [ -n "$driver" ]; then
    printf '{"file_format_version":"1.0.1","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' "$driver" > /tmp/nvidia_icd.json
    export VK_ICD_FILENAMES=/tmp/nvidia_icd.json
    echo "vulkan: wrote an ICD manifest for $driver"
  else
    echo "vulkan: no NVIDIA ICD manifest and no libGLX_nvidia.so.0 (the image may hold CUDA alone)"
  fi
fi
# A hardware adapter, or stop here (auto skips software ones, so its backend line says which).
# SOFTWARE_GPU=1 goes on without one: a dry run of this script on lavapipe, on tiny models.
"$headprint" fingerprint tests/fixtures/gpt2 --backend auto | grep '^backend:' | tee /dev/stderr | grep -q 'GPU ·' ||
  [ "${SOFTWARE_GPU:-}" = 1 ] || { echo "no hardware GPU adapter: stopping" >&2; exit 1; }

need=()
for model in llama-3.2-1b llama-3-8b; do
  [ -f "$dir/$model/config.json" ] || need+=("$model")
done
if [ ${#need[@]} -gt 0 ]; then
  start=$(date +%s)
  "$python" scripts/make_big_models.py --only "${need[@]}" --out "$dir"
  echo "checkpoints written in $(($(date +%s) - start)) s"
fi

# The GPU in native f64 (where the adapter offers it), in f32 pairs, and the CPU.
"$bench" --backends=gpu,gpu-pairs,cpu "$dir/llama-3.2-1b" "$dir/llama-3-8b"

"$python" - "$headprint" "$dir/llama-3-8b" <<'EOF'
import json, resource, subprocess, sys, time
headprint, model = sys.argv[1:]
start = time.time()
run = subprocess.run([headprint, "fingerprint", model, "--json", "--backend", "gpu"], capture_output=True, text=True)
wall = time.time() - start
peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9
backend = json.loads(run.stdout)["backend"] if run.returncode == 0 else None
print(json.dumps({"cli": "fingerprint --backend gpu", "model": model, "wall_s": round(wall, 2),
                  "peak_rss_gb": round(peak_gb, 3), "backend": backend, "exit": run.returncode,
                  "stderr": run.stderr.strip()[-500:]}))
EOF

# The induction probe: the study's size on the GPU (the issue's target), then a quarter of it on
# both backends side by side (the CPU alone would take minutes at full size).
"$probe" --copy=256 --backends=gpu "$dir/llama-3.2-1b"
"$probe" --copy=64 --backends=gpu,cpu "$dir/llama-3.2-1b"
