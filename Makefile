# Front door: every target installs missing Debian packages, configures and
# builds. Binaries land in build/bin/.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps configure build test test-all fuzz sanitize asan asan-unit tsan demo demo-models goldens clean

all: build

deps:
	@bash tools/install_deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  $(shell command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache) $(CMAKE_FLAGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Unit, golden and integration tests; tests needing ../shared/models skip
# themselves when it is absent, GPU tests when there is no GPU.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 600 $(CTEST_FLAGS)

# libFuzzer targets of the parsers (clang, ASan + UBSan, own build dir
# build-fuzz/), FUZZ_SECONDS each; see tools/fuzz.sh.
FUZZ_SECONDS ?= 60
fuzz:
	JOBS=$(JOBS) bash tools/fuzz.sh $(FUZZ_SECONDS)

# The tests under ASan + UBSan (build-asan/, everything) and TSan (build-tsan/,
# the lane, step machine and communicator tests); clang, no CUDA; see
# tools/sanitize.sh. `make asan` and `make tsan` run one of the two; `make
# asan-unit` only the unit and golden tests under ASan + UBSan (CI runs make
# tsan and make asan).
sanitize:
	JOBS=$(JOBS) bash tools/sanitize.sh all $(CTEST_FLAGS)
asan:
	JOBS=$(JOBS) bash tools/sanitize.sh asan $(CTEST_FLAGS)
asan-unit:
	JOBS=$(JOBS) bash tools/sanitize.sh asan-unit $(CTEST_FLAGS)
tsan:
	JOBS=$(JOBS) bash tools/sanitize.sh tsan $(CTEST_FLAGS)

demo: build
	bash tools/demo.sh $(BUILD)

# Regenerates models/demo from ../shared/models (hours on a CPU; see tools/train/README.md).
demo-models: build
	bash tools/train/make_demo_models.sh $(BUILD)

# Regenerates tests/golden/data with Hugging Face transformers (needs Python + torch).
goldens: build
	bash tools/goldens/make_goldens.sh

clean:
	rm -rf $(BUILD)
