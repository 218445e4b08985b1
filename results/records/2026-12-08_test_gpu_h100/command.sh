# make test-gpu's suites, 5 at a time on one GPU, each logged with its exit code (logs/SUITE.txt,
# logs/SUITE.rc), after the build (logs/build.txt), in the same run of the machine as the record
# 2026-12-08_default_job_h100-20runs (its build reused).
make -j16 all build/tests/test_attention_gpu build/tests/test_model_gpu build/tests/layers/adam build/tests/layers/cast build/tests/layers/checksum build/tests/layers/embedding build/tests/layers/gemm_stress build/tests/layers/head_ce build/tests/layers/matmul build/tests/layers/mix build/tests/layers/mlp_gemm build/tests/layers/multi_tensor build/tests/layers/muon build/tests/layers/norm_mix build/tests/layers/qk_norm_rotary build/tests/layers/relu2 build/tests/layers/rmsnorm build/tests/layers/rotary build/tests/layers/softcap_ce build/tests/layers/value_embed_backward build/attn_run build/model_dump > logs/build.txt 2>&1
git rev-parse --short HEAD > logs/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > logs/gpu.txt
printf '%s\n' gpu-attention-sm90 gpu-attention gpu-attention-sm80 gpu-readme-jobs gpu-layers gpu-training gpu-peer gpu-torch-check gpu-model gpu-attn-run \
  | xargs -P 5 -I{} sh -c 'make -o build/version.cpp --no-print-directory {} > logs/{}.txt 2>&1; echo $? > logs/{}.rc'
