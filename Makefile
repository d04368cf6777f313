# turbospark: one GNU Makefile.
#   make            build build/turbospark and build/libturbospark.a (CPU engine)
#   make test       build and run the test suite (prints "N passed, N failed")
#   make asan       build and run the suite under AddressSanitizer + UBSan (build-asan/)
#   make run        build, then run the bundled default model
#   make deps       install missing Debian packages (cJSON, PCRE2, utf8proc, libmicrohttpd)
#   make fuzz       build the libFuzzer harnesses (clang, ASan + UBSan + LeakSanitizer) into
#                   build-fuzz/fuzz/NAME (tests/fuzz/RESULTS.md: how to run them)
#   make CUDA=1     also build src/cuda/*.cu with nvcc (CUDA_ARCH=sm_90 by default) into the same
#                   binaries and library, plus build/cuda_bench; without it src/cuda/stub.c
#                   stands in ("built without CUDA")
#
# Sources are found by wildcard: a new module is a new .c file, no edit here.
# Kernel files named *_avx2.c / *_avx512.c / *_amx.c get their ISA flags; the code picks
# one at run time, so the binary runs on any x86-64.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WERROR  ?=
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wno-unused-parameter -Wno-sign-compare $(WERROR)
ALL_CFLAGS := -std=gnu11 $(CFLAGS) $(WARN) -Iinclude -Isrc \
              -fvisibility=hidden -pthread $(EXTRA_CFLAGS)
TOOL_CFLAGS := -std=gnu11 $(CFLAGS) $(WARN) -Iinclude -Itools/cli -Itools/server \
              -fvisibility=hidden -pthread $(EXTRA_CFLAGS)
LDLIBS  := -lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lreadline -lm -lpthread $(EXTRA_LDLIBS)

AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c

LIB_SRC  := $(sort $(wildcard src/*.c src/*/*.c))
CLI_SRC  := $(sort $(wildcard tools/*/*.c))
# tests/fuzz/: the fuzz harnesses, also linked into ts_test (group fuzz replays their
# corpora); the server's request layer comes with them (and what it calls).
FUZZ_SRC := $(filter-out tests/fuzz/libfuzzer.c,$(sort $(wildcard tests/fuzz/*.c)))
FUZZ_TOOL_SRC := tools/server/server_req.c tools/server/server_gen.c tools/server/server_tools.c \
                 tools/server/server_cc.c tools/cli/cli_util.c tools/cli/cli_reuse.c
TEST_SRC := $(sort $(wildcard tests/*.c)) $(FUZZ_SRC)

# ---- CUDA (make CUDA=1): the kernels of src/cuda/ under nvcc, linked with the
# static CUDA runtime (a GPU host needs the driver only); the stub otherwise.
CUDA      ?= 0
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= sm_90
NVCC_FLAGS := -std=c++17 -O3 -lineinfo -arch=$(CUDA_ARCH) -Iinclude -Isrc \
              -Xcompiler -fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter \
              $(if $(WERROR),-Werror all-warnings) $(EXTRA_NVCC_FLAGS)
CU_OBJ :=
ifeq ($(CUDA),1)
LIB_SRC := $(filter-out src/cuda/stub.c,$(LIB_SRC))
CU_OBJ  := $(patsubst %.cu,$(BUILD)/%.o,$(sort $(wildcard src/cuda/*.cu)))
LDLIBS  += -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -ldl -lstdc++
endif

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o) $(FUZZ_TOOL_SRC:%.c=$(BUILD)/%.o)
DEPFILES := $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)

.PHONY: all test asan run deps clean bench fuzz fuzz-bins FORCE
all: $(BUILD)/turbospark $(BUILD)/ts_test $(if $(filter 1,$(CUDA)),$(BUILD)/cuda_bench)

# Rebuilds the library and test runner when CUDA= or CUDA_ARCH= changes
# (the object lists differ, the objects' times do not).
$(BUILD)/cuda.stamp: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CUDA) $(CUDA_ARCH)' | cmp -s - $@ || echo '$(CUDA) $(CUDA_ARCH)' > $@

$(BUILD)/libturbospark.a: $(LIB_OBJ) $(BUILD)/cuda.stamp
	@rm -f $@
	ar rcs $@ $(LIB_OBJ)

$(BUILD)/turbospark: $(CLI_OBJ) $(BUILD)/libturbospark.a
	$(CC) $(ALL_CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libturbospark.a $(LDLIBS)

# The test runner links the library objects directly (it tests internals too).
$(BUILD)/ts_test: $(TEST_OBJ) $(LIB_OBJ) $(BUILD)/cuda.stamp
	$(CC) $(ALL_CFLAGS) -o $@ $(TEST_OBJ) $(LIB_OBJ) $(LDLIBS)

# The GPU kernels' benchmark (bench/cuda/, CUDA=1 only; scripts/gpu_check.sh runs it).
$(BUILD)/cuda_bench: $(BUILD)/bench/cuda/cuda_bench.o $(BUILD)/libturbospark.a
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libturbospark.a $(LDLIBS)

$(BUILD)/%.o: %.cu $(BUILD)/cuda.stamp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX2_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -mamx-tile -mamx-int8 -MMD -MP -c -o $@ $<

# Frontends see the public header only: tools/ compile without -Isrc, so an
# #include of an internal header there fails the build (style.md's layering rule).
$(BUILD)/tools/%.o: tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(TOOL_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

# The server harness (and the constraint cache's test) include tools/server/server.h.
$(BUILD)/tests/fuzz/%.o $(BUILD)/tests/test_toolchoice.o: ALL_CFLAGS += -Itools/cli -Itools/server

-include $(DEPFILES)

deps:
	@scripts/deps.sh

# TS_TEST_ARGS selects groups, e.g. make test TS_TEST_ARGS="loader model".
test: deps
	@$(MAKE) --no-print-directory $(BUILD)/turbospark $(BUILD)/ts_test
	TS_BIN=$(BUILD)/turbospark $(BUILD)/ts_test $(TS_TEST_ARGS)

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 \
	  EXTRA_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  EXTRA_LDLIBS="-fsanitize=address,undefined" test

run: deps
	@$(MAKE) --no-print-directory $(BUILD)/turbospark
	$(BUILD)/turbospark run -p "Once upon a time" -n 64 --temp 0.7 --top-p 0.9 --seed 42

# libFuzzer binaries, one per harness (FUZZ=1 is the sub-make's mode). The parsers (src/text,
# src/loader, src/util), the server objects and the harnesses carry coverage instrumentation and
# the sanitizers; the numeric code no harness reaches (src/cpu, model, engine, gen, quant) is
# compiled plainly, which keeps this build minutes shorter. tests/fuzz/libfuzzer.c is the entry.
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(filter tests/fuzz/fuzz_%.c,$(FUZZ_SRC)))
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
fuzz:
	@scripts/deps.sh fuzz
	$(MAKE) FUZZ=1 BUILD=build-fuzz CC=clang OPT=-O1 fuzz-bins

fuzz-bins: $(FUZZ_NAMES:%=$(BUILD)/fuzz/%)

ifeq ($(FUZZ),1)
FUZZ_INSTR := -fsanitize=fuzzer-no-link $(FUZZ_SAN)
FUZZ_PLAIN := $(BUILD)/src/cpu/%.o $(BUILD)/src/model/%.o $(BUILD)/src/engine/%.o $(BUILD)/src/gen/%.o \
              $(BUILD)/src/quant/%.o
ALL_CFLAGS += $(FUZZ_INSTR)
TOOL_CFLAGS += $(FUZZ_INSTR)
$(FUZZ_PLAIN): ALL_CFLAGS := $(filter-out $(FUZZ_INSTR),$(ALL_CFLAGS))
# ...except the two parsers of src/model that harnesses feed (the DFlash drafter's config, sizes):
# a target's own variable comes before the pattern's.
$(BUILD)/src/model/dflash.o $(BUILD)/src/model/experts.o: ALL_CFLAGS := $(ALL_CFLAGS)
# clang 14 does not know __builtin_cpu_supports("f16c") (src/cpu/linear.c's kernel choice):
# that one file is compiled with gcc (plain, like its neighbours).
$(BUILD)/src/cpu/linear.o: src/cpu/linear.c
	@mkdir -p $(dir $@)
	gcc -std=gnu11 $(OPT) -g $(WARN) -Iinclude -Isrc -fvisibility=hidden -pthread -MMD -MP -c -o $@ $<
endif

# Every harness object goes in (common.c's table names them all); only NAME's runs.
$(BUILD)/fuzz/%: tests/fuzz/libfuzzer.c $(FUZZ_SRC:%.c=$(BUILD)/%.o) $(FUZZ_TOOL_SRC:%.c=$(BUILD)/%.o) \
                 $(BUILD)/libturbospark.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer -DFUZZ_ENTRY=fuzz_$* -o $@ $< \
	  $(filter %.o %.a,$^) $(LDLIBS) $(FUZZ_SAN)

clean:
	rm -rf build build-asan build-fuzz build-cuda
