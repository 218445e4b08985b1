// Minimal check macros for the C++ test binaries: CHECK records pass/fail with a message;
// test_summary() prints 'NAME: N passed, N failed' and returns the exit code.
#pragma once
#include <cstdio>

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
