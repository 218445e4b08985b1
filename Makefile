# train_gpt: build, tests and benchmarks. `make help` lists the targets.
#
#   make                 ./train_gpt and the tools (build/prepare, build/tokenize, build/attn_run, build/model_dump)
#   make test            every test that needs no GPU (what CI runs)
#   make test-gpu        kernel tests and whole training runs on a GPU (two GPUs: data-parallel tests too;
#                        make -j4 --output-sync=target test-gpu runs its suites side by side)
#   make bench           benchmarks on a GPU
#   make data            GCIDE token shards under data/gcide/ (the default job's corpus)
#   GPU_ARCH=...         nvcc code generation (default: Hopper sm_90a and Ampere sm_80)
#   USE_MPI=0            build without MPI even when OpenMPI is found

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || echo $(CUDA_HOME)/bin/nvcc)
CXX ?= g++
# a python3 that has the tools' modules (scripts/setup.sh installs them for /usr/bin/python3)
PYTHON ?= $(or $(shell for p in python3 /usr/bin/python3; do $$p -c 'import numpy, scipy, statsmodels, matplotlib, regex' 2>/dev/null && echo $$p && break; done),python3)
GPU_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80
# a python3 that has PyTorch (the GPU machine's python3 does), for test-torch
PYTHON_TORCH ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import torch, numpy' 2>/dev/null && echo $$p && break; done)
VOCAB_DIR ?= data/gpt2
GCIDE_DIR ?= /usr/share/dictd
# shards for the whole-run tests of test-gpu (the GCIDE shards of `make data`)
TEST_TRAIN_DATA ?= data/gcide/gcide_train_*.bin
TEST_VAL_DATA ?= data/gcide/gcide_val_*.bin

CXXFLAGS := -std=c++17 -O3 -Wall -Wextra -I. -MMD -MP -fopenmp
NVCCFLAGS := -std=c++17 -O3 $(GPU_ARCH) -I. -MMD -MP -Xcompiler -Wall -Xcompiler -Wextra \
             --expt-relaxed-constexpr -lineinfo
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl

USE_MPI ?= $(shell command -v mpicxx >/dev/null 2>&1 && echo 1 || echo 0)
ifeq ($(USE_MPI),1)
  MPI_CFLAGS := $(shell mpicxx --showme:compile) -DUSE_MPI
  MPI_LIBS := $(foreach f,$(shell mpicxx --showme:link),$(if $(filter -Wl%,$(f)),-Xlinker $(subst -Wl$(comma),,$(f)),$(f)))
endif
comma := ,
# SHA-256 (common/sha256.h) is OpenSSL's libcrypto
CRYPTO_LIBS := -lcrypto

BUILD := build
TOOLS := $(BUILD)/prepare $(BUILD)/tokenize
ATTN_OBJS := $(BUILD)/attention/dispatch.o $(BUILD)/attention/doc_spans.o $(BUILD)/attention/bwd_preprocess.o $(BUILD)/attention/attention_fwd.o $(BUILD)/attention/attention_bwd.o \
             $(BUILD)/attention/attention_fwd_sm90.o $(BUILD)/attention/attention_bwd_sm90.o
CPU_TESTS := $(BUILD)/tests/test_data $(BUILD)/tests/test_attention_cpu $(BUILD)/tests/test_model_cpu \
             $(BUILD)/tests/test_optimizer_cpu $(BUILD)/tests/test_loader_log $(BUILD)/tests/test_checkpoint \
             $(BUILD)/tests/test_dist $(BUILD)/tests/test_ready_point $(BUILD)/tests/test_exchange_windows \
             $(BUILD)/tests/test_shard_plan $(BUILD)/tests/test_hand_out $(BUILD)/tests/test_recipes \
             $(BUILD)/tests/test_target_leak $(BUILD)/tests/test_fp8 $(BUILD)/tests/test_bos_loader
MODEL_OBJS := $(BUILD)/model/config.o $(BUILD)/model/batch.o
# the options and the shipped recipes built into the binary (recipes/*.toml)
OPTIONS_OBJS := $(BUILD)/train/options.o $(BUILD)/recipes.o
# the pieces of a run that need no GPU (train/): its data, what its options make of the model, the
# data checks, the fault injection
RUN_OBJS := $(BUILD)/train/run_data.o $(BUILD)/train/run_config.o $(BUILD)/train/data_check.o $(BUILD)/train/fault_injection.o
MODEL_REF_OBJS := $(MODEL_OBJS) $(BUILD)/model/reference_model.o $(BUILD)/model/optimizer_reference.o $(BUILD)/attention/reference.o
# one test binary a layer (tests/layers/NAME.cu)
LAYER_TESTS := $(patsubst tests/layers/%.cu,$(BUILD)/tests/layers/%,$(wildcard tests/layers/*.cu))
GPU_TESTS := $(BUILD)/tests/test_attention_gpu $(LAYER_TESTS) $(BUILD)/tests/test_model_gpu

.PHONY: all test test-torch bench data setup clean help
all: train_gpt $(TOOLS) $(BUILD)/attn_run $(BUILD)/model_dump

help:
	@sed -n '1,10p' Makefile

setup:
	./scripts/setup.sh

# ---------------------------------------------------------------------------- binaries
train_gpt: $(BUILD)/train_gpt.o $(ATTN_OBJS) $(BUILD)/data/dataloader.o $(BUILD)/train/run_log.o $(OPTIONS_OBJS) $(BUILD)/train/checkpoint.o \
           $(BUILD)/train/dist.o $(BUILD)/train/start_gate.o $(RUN_OBJS) $(MODEL_OBJS) $(BUILD)/version.o
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) $(MPI_LIBS) $(CRYPTO_LIBS) -Xcompiler -fopenmp -lgomp

# The commit the binary was built from, for its logs: rewritten only when it changes, so that a
# new commit relinks train_gpt without recompiling it. "-dirty" when tracked files differ.
# Beside it the digest of the source tree as built (kSourceDigest): SHA-256 over the sha256sum
# lines (hash, path; sorted by path) of every C++/CUDA source (.cu .cuh .h .cpp) outside tests/
# and bench/, the shipped recipes (recipes/*.toml, built in) and this Makefile: git's tracked files where this is a checkout, else every such
# file under this folder but build/. It changes with any edit to what the binary may compile,
# committed or not. `make source-digest` prints it; tests/test_source_digest.py recomputes it.
GIT_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo -dirty)
SOURCE_LIST := { git ls-files -- '*.cu' '*.cuh' '*.h' '*.cpp' Makefile 'recipes/*.toml' 2>/dev/null || find . -path ./build -prune -o -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.h' -o -name '*.cpp' -o -name Makefile -o -path './recipes/*.toml' \) -print | sed 's|^\./||'; } \
               | grep -v -e '^tests/' -e '^bench/' | LC_ALL=C sort
SOURCE_DIGEST = $$($(SOURCE_LIST) | while read -r f; do [ -f "$$f" ] && sha256sum "$$f"; done | sha256sum | cut -c1-64)
$(BUILD)/version.cpp: FORCE
	@mkdir -p $(BUILD)
	@d=$(SOURCE_DIGEST); echo 'extern const char* const kGitCommit; const char* const kGitCommit = "$(GIT_COMMIT)";' > $@.new; \
	  echo "extern const char* const kSourceDigest; const char* const kSourceDigest = \"$$d\";" >> $@.new
	@cmp -s $@.new $@ && rm -f $@.new || mv -f $@.new $@
source-digest:
	@echo $(SOURCE_DIGEST)
$(BUILD)/version.o: $(BUILD)/version.cpp
	$(CXX) $(CXXFLAGS) -c $< -o $@

# The shipped recipes (recipes/NAME.toml) built into the binary (train/shipped_recipes.h), so that
# --preset NAME reads the same text from any working directory; --recipe FILE reads a file.
# Each file's bytes as a C array (od), so that no text in a recipe can end the literal.
RECIPES := $(sort $(wildcard recipes/*.toml))
$(BUILD)/recipes.cpp: $(RECIPES) Makefile
	@mkdir -p $(BUILD)
	@{ echo '#include "train/shipped_recipes.h"'; echo 'namespace train {'; i=0; \
	  for f in $(RECIPES); do echo "static const char r$$i[] = {"; od -An -v -tx1 "$$f" | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	    echo '0};'; i=$$((i + 1)); done; \
	  echo 'const ShippedRecipe kShippedRecipes[] = {'; i=0; \
	  for f in $(RECIPES); do echo "  {\"$$(basename "$$f" .toml)\", r$$i},"; i=$$((i + 1)); done; \
	  echo '  {nullptr, nullptr}};'; echo 'const int kShippedRecipeCount = '$(words $(RECIPES))';'; echo '}  // namespace train'; } > $@.new
	@mv -f $@.new $@
$(BUILD)/recipes.o: $(BUILD)/recipes.cpp
	$(CXX) $(CXXFLAGS) -c $< -o $@
.PHONY: FORCE source-digest
FORCE:

# MPI (when found) is confined to train/dist.cpp
$(BUILD)/train/dist.o: train/dist.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(MPI_CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/prepare: $(BUILD)/data/prepare.o $(BUILD)/data/tokenizer.o
	$(CXX) $^ -o $@ -pthread -lz $(CRYPTO_LIBS)

$(BUILD)/tokenize: $(BUILD)/data/tokenize_main.o $(BUILD)/data/tokenizer.o
	$(CXX) -fopenmp $^ -o $@ $(CRYPTO_LIBS)

$(BUILD)/attn_run: $(BUILD)/attention/attn_run.o $(ATTN_OBJS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@

# ---------------------------------------------------------------------------- tests
$(BUILD)/tests/test_data: $(BUILD)/tests/test_data.o
	$(CXX) -fopenmp $^ -o $@ $(CRYPTO_LIBS)

$(BUILD)/tests/test_attention_cpu: $(BUILD)/tests/test_attention_cpu.o $(BUILD)/attention/reference.o
	$(CXX) -fopenmp $^ -o $@

$(BUILD)/tests/test_model_cpu: $(BUILD)/tests/test_model_cpu.o $(MODEL_REF_OBJS)
	$(CXX) -fopenmp $^ -o $@

$(BUILD)/tests/test_target_leak: $(BUILD)/tests/test_target_leak.o $(MODEL_REF_OBJS)
	$(CXX) -fopenmp $^ -o $@

$(BUILD)/tests/test_loader_log: $(BUILD)/tests/test_loader_log.o $(BUILD)/data/dataloader.o $(BUILD)/train/run_log.o $(OPTIONS_OBJS)
	$(CXX) $^ -o $@ $(CRYPTO_LIBS)

$(BUILD)/tests/test_recipes: $(BUILD)/tests/test_recipes.o $(OPTIONS_OBJS) $(MODEL_OBJS)
	$(CXX) -fopenmp $^ -o $@

# the training loader as the trainer builds it (train::Data), with and without BOS alignment
$(BUILD)/tests/test_bos_loader: $(BUILD)/tests/test_bos_loader.o $(BUILD)/data/dataloader.o $(BUILD)/train/run_data.o $(BUILD)/train/run_config.o \
	$(BUILD)/train/data_check.o $(BUILD)/train/checkpoint.o $(OPTIONS_OBJS) $(MODEL_OBJS)
	$(CXX) -fopenmp $^ -o $@ $(CRYPTO_LIBS)

# the FP8 reference against CUDA's host conversions (<cuda_fp8.h>, header-only on the host: no
# CUDA library is linked and no GPU is needed); -isystem keeps the header's warnings out
$(BUILD)/tests/test_fp8.o: tests/test_fp8.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -isystem $(CUDA_HOME)/include -c $< -o $@

$(BUILD)/tests/test_fp8: $(BUILD)/tests/test_fp8.o
	$(CXX) $^ -o $@

$(BUILD)/tests/test_checkpoint: $(BUILD)/tests/test_checkpoint.o $(BUILD)/train/checkpoint.o
	$(CXX) $^ -o $@

$(BUILD)/tests/test_ready_point: $(BUILD)/tests/test_ready_point.o $(MODEL_OBJS)
	$(CXX) -fopenmp $^ -o $@

$(BUILD)/tests/test_exchange_windows: $(BUILD)/tests/test_exchange_windows.o $(MODEL_OBJS)
	$(CXX) -fopenmp $^ -o $@

$(BUILD)/tests/test_shard_plan: $(BUILD)/tests/test_shard_plan.o $(MODEL_OBJS)
	$(CXX) -fopenmp $^ -o $@

$(BUILD)/tests/test_hand_out: $(BUILD)/tests/test_hand_out.o $(BUILD)/data/dataloader.o
	$(CXX) $^ -o $@ $(CRYPTO_LIBS)

$(BUILD)/tests/test_dist: $(BUILD)/tests/test_dist.o $(BUILD)/train/dist.o $(BUILD)/train/start_gate.o
	$(CXX) $^ -o $@ $(shell $(if $(filter 1,$(USE_MPI)),mpicxx --showme:link,true)) $(CRYPTO_LIBS)

$(BUILD)/tests/test_optimizer_cpu: $(BUILD)/tests/test_optimizer_cpu.o $(MODEL_REF_OBJS)
	$(CXX) -fopenmp $^ -o $@

$(BUILD)/model_dump: $(BUILD)/model/dump_reference.o $(MODEL_REF_OBJS)
	$(CXX) -fopenmp $^ -o $@

# the reference model against an independent PyTorch implementation (needs PyTorch; part of test-gpu)
test-torch: $(BUILD)/model_dump
	$(PYTHON_TORCH) tests/torch_model_check.py $(BUILD)

$(BUILD)/tests/test_attention_gpu: $(BUILD)/tests/test_attention_gpu.o $(ATTN_OBJS) $(BUILD)/attention/reference.o
	$(NVCC) $(NVCCFLAGS) $^ -o $@ -Xcompiler -fopenmp -lgomp

# (their fp64 references may run on every core)
$(BUILD)/tests/layers/%.o: tests/layers/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fopenmp -c $< -o $@

$(BUILD)/tests/layers/%: $(BUILD)/tests/layers/%.o $(MODEL_REF_OBJS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ -lcublasLt -Xcompiler -fopenmp -lgomp

$(BUILD)/tests/test_model_gpu: $(BUILD)/tests/test_model_gpu.o $(ATTN_OBJS) $(MODEL_REF_OBJS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ -lcublasLt -Xcompiler -fopenmp -lgomp

$(BUILD)/tests/test_attention_gpu.o: tests/test_attention_gpu.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fopenmp -c $< -o $@

test: train_gpt $(TOOLS) $(CPU_TESTS) $(BUILD)/attn_run $(BUILD)/model_dump $(BUILD)/bench/bench_attention $(BUILD)/bench/bench_matmul \
      $(BUILD)/bench/exchange_bench
	@BUILD=$(BUILD) PYTHON=$(PYTHON) VOCAB_DIR=$(VOCAB_DIR) GCIDE_DIR=$(GCIDE_DIR) bash tests/run_cpu_tests.sh

# test-gpu's suites, each a target of its own, so that `make -j4 --output-sync=target test-gpu` runs
# them side by side on one GPU (each suite's checks do not depend on its speed); plain `make
# test-gpu` runs them one after another.
GPU_SUITES := gpu-attention gpu-attention-sm80 gpu-attention-sm90 gpu-layers gpu-model gpu-attn-run gpu-torch-check gpu-peer \
              gpu-training gpu-readme-jobs
.PHONY: test-gpu gpu-check gpu-build gpu-suites $(GPU_SUITES)
test-gpu: $(GPU_SUITES)
gpu-build: all $(GPU_TESTS)   # what the suites run, built at once (scripts/record_test_gpu.sh)
gpu-suites:
	@echo $(GPU_SUITES)
gpu-check:
	@nvidia-smi -L >/dev/null 2>&1 || { echo "test-gpu: no GPU on this machine (nvidia-smi finds none)"; exit 1; }
gpu-attention: gpu-check $(BUILD)/tests/test_attention_gpu
	$(BUILD)/tests/test_attention_gpu                   # the kernels this GPU runs by default
gpu-attention-sm80: gpu-check $(BUILD)/tests/test_attention_gpu
	$(BUILD)/tests/test_attention_gpu --kernels sm80    # the mma.sync kernels too (on Hopper the first run took wgmma's)
gpu-attention-sm90: gpu-check $(BUILD)/tests/test_attention_gpu
	@if nvidia-smi --query-gpu=compute_cap --format=csv,noheader | grep -q '^9'; then \
	  echo "$(BUILD)/tests/test_attention_gpu --kernels sm90 --sm90-backward fused"; $(BUILD)/tests/test_attention_gpu --kernels sm90 --sm90-backward fused && \
	  echo "$(BUILD)/tests/test_attention_gpu --kernels sm90 --sm90-backward two-kernels"; $(BUILD)/tests/test_attention_gpu --kernels sm90 --sm90-backward two-kernels; fi
gpu-layers: gpu-check $(LAYER_TESTS)
	@for t in $(LAYER_TESTS); do echo $$t; $$t || exit 1; done
gpu-model: gpu-check $(BUILD)/tests/test_model_gpu
	$(BUILD)/tests/test_model_gpu
gpu-attn-run: gpu-check $(BUILD)/attn_run
	$(PYTHON) tests/test_attn_run.py $(BUILD)/attn_run
gpu-torch-check: gpu-check $(BUILD)/model_dump
	$(PYTHON_TORCH) tests/torch_model_check.py $(BUILD)
gpu-peer: gpu-check train_gpt
	$(PYTHON_TORCH) tests/test_torch_peer_gpu.py '$(TEST_TRAIN_DATA)' '$(TEST_VAL_DATA)' ./train_gpt
gpu-training: gpu-check train_gpt
	$(PYTHON) tests/test_training_gpu.py '$(TEST_TRAIN_DATA)' '$(TEST_VAL_DATA)' ./train_gpt
gpu-readme-jobs: gpu-check train_gpt
	$(PYTHON) tests/test_readme_jobs_gpu.py '$(TEST_TRAIN_DATA)' '$(TEST_VAL_DATA)' ./train_gpt

bench: $(BUILD)/bench/bench_attention $(BUILD)/bench/bench_matmul
	@nvidia-smi -L >/dev/null 2>&1 || { echo "bench: no GPU on this machine"; exit 1; }
	$(BUILD)/bench/bench_attention
	$(BUILD)/bench/bench_matmul

$(BUILD)/bench/bench_attention: $(BUILD)/bench/bench_attention.o $(ATTN_OBJS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@

$(BUILD)/bench/bench_matmul: $(BUILD)/bench/bench_matmul.o $(BUILD)/version.o
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS)

# several GPUs: mpirun -np N build/bench/exchange_bench (bench/gpu_bench.sh PARTS=exchange runs it)
$(BUILD)/bench/exchange_bench: $(BUILD)/bench/exchange_bench.o $(BUILD)/train/dist.o $(MODEL_OBJS)
	$(NVCC) $(NVCCFLAGS) $^ -o $@ $(CUDA_LIBS) $(MPI_LIBS) -Xcompiler -fopenmp -lgomp

# ---------------------------------------------------------------------------- data
data: data/gcide/manifest.tsv
data/gcide/manifest.tsv: $(BUILD)/prepare
	$(BUILD)/prepare --gcide-dir $(GCIDE_DIR) --vocab-dir $(VOCAB_DIR) --out-dir data/gcide

clean:
	rm -rf $(BUILD) train_gpt

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
