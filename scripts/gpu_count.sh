# Sourced by the GPU scripts (bench/gpu_bench.sh, peer/peer_compare.sh): gpu_count prints the GPUs
# a program started here may use. nvidia-smi lists every GPU of the machine whatever
# CUDA_VISIBLE_DEVICES says, so where that variable is set the count is the smaller of nvidia-smi's
# and the variable's, read as CUDA reads it: entries (an index or a GPU-/MIG- UUID) up to the first
# that is not one.
gpu_count() {
  local n d named=0
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    local -a devs
    IFS=, read -r -a devs <<< "$CUDA_VISIBLE_DEVICES,"
    for d in "${devs[@]}"; do
      d=${d// /}
      [[ "$d" =~ ^([0-9]+|GPU-[0-9A-Fa-f-]+|MIG-[^[:space:]]+)$ ]] || break
      named=$((named + 1))
    done
    [ "$named" -lt "$n" ] && n=$named
  fi
  echo "$n"
}
