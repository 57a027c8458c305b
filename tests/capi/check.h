/* A minimal C test harness for the C ABI tests: CHECK macros that count
 * failures and keep going, REQUIRE macros that end the current test, and
 * error checks that verify the code and that the message names the
 * argument. */
#ifndef RESHARD_TESTS_CAPI_CHECK_H_
#define RESHARD_TESTS_CAPI_CHECK_H_

#include <stdio.h>
#include <string.h>

#include "reshard/reshard.h"

/* Failed checks; each test program defines it once. */
extern int g_failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

#define REQUIRE(cond)                                                            \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                              \
      return;                                                                    \
    }                                                                            \
  } while (0)

/* Returns 1 when `error` is NULL; otherwise reports and destroys it. */
static inline int ok_(reshard_error_t* error, const char* file, int line, const char* expr) {
  if (error == NULL) return 1;
  fprintf(stderr, "%s:%d: %s failed: [%s] %s\n", file, line, expr,
          reshard_error_code_name(reshard_error_code(error)), reshard_error_message(error));
  reshard_error_destroy(error);
  ++g_failures;
  return 0;
}

#define CHECK_OK(expr) ((void)ok_((expr), __FILE__, __LINE__, #expr))
#define REQUIRE_OK(expr)                                 \
  do {                                                   \
    if (!ok_((expr), __FILE__, __LINE__, #expr)) return; \
  } while (0)

/* Checks that `error` is an error with `code` whose message contains
 * `text` (the argument it must name); destroys it. Returns 1 on success. */
static inline int err_(reshard_error_t* error, reshard_error_code_t code, const char* text,
                       const char* file, int line, const char* expr) {
  int good = 1;
  if (error == NULL) {
    fprintf(stderr, "%s:%d: %s succeeded, expected %s\n", file, line, expr,
            reshard_error_code_name(code));
    ++g_failures;
    return 0;
  }
  if (reshard_error_code(error) != code) {
    fprintf(stderr, "%s:%d: %s gave [%s] %s, expected code %s\n", file, line, expr,
            reshard_error_code_name(reshard_error_code(error)), reshard_error_message(error),
            reshard_error_code_name(code));
    good = 0;
  } else if (strstr(reshard_error_message(error), text) == NULL) {
    fprintf(stderr, "%s:%d: %s gave message \"%s\", which does not mention \"%s\"\n", file, line,
            expr, reshard_error_message(error), text);
    good = 0;
  }
  reshard_error_destroy(error);
  if (!good) ++g_failures;
  return good;
}

#define CHECK_ERR(expr, code, text) ((void)err_((expr), (code), (text), __FILE__, __LINE__, #expr))

#endif /* RESHARD_TESTS_CAPI_CHECK_H_ */
