# loom — one entry point. The two set-up commands are `make demo` and
# `make test`; both install the Debian packages they need first.
BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all test demo bench install clean asan tsan deps deps-test deps-bench check-sanitizers

all: $(BUILD)/Makefile
	@cmake --build $(BUILD) -j $(JOBS)

$(BUILD)/Makefile: CMakeLists.txt
	@scripts/deps.sh build
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null

deps:
	@scripts/deps.sh build
deps-test:
	@scripts/deps.sh test
deps-bench:
	@scripts/deps.sh bench

# Unit, stress and integration tests of the default build, then the
# sanitizer builds' tests (ASan+valgrind-visible switches, TSan).
test: deps-test
	@$(MAKE) --no-print-directory all
	@cd $(BUILD) && ctest --output-on-failure -j 1 --timeout 600
	@$(MAKE) --no-print-directory check-sanitizers

check-sanitizers:
	@$(MAKE) --no-print-directory asan
	@$(MAKE) --no-print-directory tsan

asan: deps-test
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=address >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && LOOM_TEST_SCALE=10 ctest --output-on-failure -L sanitize --timeout 600

tsan: deps-test
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	@cd build-tsan && LOOM_TEST_SCALE=1000 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure -L sanitize --timeout 600

# Until the web server lands, the demo is the micro-benchmark table.
demo: deps-bench
	@$(MAKE) --no-print-directory all
	@scripts/bench micro --quick

bench: deps-bench
	@$(MAKE) --no-print-directory all
	@scripts/bench all

install: all
	@cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	@rm -rf $(BUILD) build-asan build-tsan bench-results
