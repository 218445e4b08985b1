#!/usr/bin/env bash
# Installs what the project needs from the system's packages (Debian/Ubuntu), when run as root
# or with sudo; otherwise prints the exact command to run. Safe to run again: it installs only
# what is missing. The CUDA toolkit (nvcc, cuBLAS, NCCL) is checked, not installed: it comes
# from NVIDIA's repository or the machine's image.
set -euo pipefail
pkgs=(build-essential libcli11-dev libopenmpi-dev openmpi-bin python3 python3-numpy python3-matplotlib
      python3-regex python3-scipy python3-tomlkit python3-statsmodels dict-gcide zlib1g-dev nlohmann-json3-dev libtomlplusplus-dev libssl-dev git)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo"; else
    echo "setup: not root and no sudo: run this as root, then again:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc >/dev/null && [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
  echo "setup: nvcc not found: install the CUDA toolkit (12.4 or newer, with cuBLAS and NCCL) and put its bin/ on PATH" >&2
  exit 1
fi
inc_ok=0
for d in "$CUDA_HOME/include" /usr/include; do [ -f "$d/nccl.h" ] && inc_ok=1; done
if [ $inc_ok = 0 ]; then
  echo "setup: nccl.h not found: install NCCL (Debian/Ubuntu with NVIDIA's repository: apt-get install libnccl-dev)" >&2
  exit 1
fi
echo "setup: all dependencies present"
