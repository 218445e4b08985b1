// Minimal check macros for the C++ test binaries: CHECK records pass/fail with a message;
// test_summary() prints 'NAME: N passed, N failed' and returns the exit code.
// An exception that leaves main (a CUDA error, CudaError from common/cuda_check.h) ends the
// test with its message and exit 1, counted by the runner as a failure.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <exception>

static const bool g_terminate_handler_set = [] {
  std::set_terminate([] {
    try {
      if (auto e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::printf("FAIL: uncaught exception: %s\n", ex.what());
    } catch (...) {
      std::printf("FAIL: uncaught exception\n");
    }
    std::fflush(stdout);
    std::_Exit(1);
  });
  return true;
}();

static int g_passed = 0, g_failed = 0;
#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (cond) {                                                 \
      g_passed++;                                               \
    } else {                                                    \
      g_failed++;                                               \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                 \
      std::printf("\n");                                        \
    }                                                           \
  } while (0)

static inline int test_summary(const char* suite) {
  std::printf("%s: %d passed, %d failed\n", suite, g_passed, g_failed);
  return g_failed ? 1 : 0;
}
