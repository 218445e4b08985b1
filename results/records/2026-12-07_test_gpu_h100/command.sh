# make test-gpu's suites, four at a time on one GPU, each logged with its exit code (logs/SUITE.txt,
# logs/SUITE.rc), after the build (logs/build.txt). Alongside them ran compute-sanitizer's racecheck
# on `build/tests/layers/gemm_stress --quick`, stopped unfinished when the suites' time ran out (not kept).
make -j16 all build/tests/test_attention_gpu build/tests/test_model_gpu $(ls tests/layers/*.cu | sed 's#tests/layers/\(.*\)\.cu#build/tests/layers/\1#') build/attn_run build/model_dump > logs/build.txt 2>&1
git rev-parse --short HEAD > logs/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > logs/gpu.txt
printf '%s\n' gpu-attention-sm90 gpu-attention gpu-attention-sm80 gpu-readme-jobs gpu-layers gpu-training gpu-peer gpu-torch-check gpu-model gpu-attn-run \
  | xargs -P 4 -I{} sh -c 'make -o build/version.cpp --no-print-directory {} > logs/{}.txt 2>&1; echo $? > logs/{}.rc'
