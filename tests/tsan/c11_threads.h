/* Force-included (-include) into the C ABI test in the ThreadSanitizer build
 * only: C11 thrd_create/thrd_join as pthread_create/pthread_join. The TSan
 * runtimes of GCC 12 and clang 14 do not intercept glibc's thrd_create, so a
 * thread it starts has no TSan state and crashes at its first instrumented
 * access (a SEGV in __tsan_func_entry), whatever the code under test does. */
#ifndef RESHARD_TESTS_TSAN_C11_THREADS_H
#define RESHARD_TESTS_TSAN_C11_THREADS_H
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

typedef struct reshard_tsan_start {
  thrd_start_t func;
  void* arg;
} reshard_tsan_start;

static void* reshard_tsan_trampoline(void* p) {
  reshard_tsan_start s = *(reshard_tsan_start*)p;
  free(p);
  return (void*)(intptr_t)s.func(s.arg);
}

static inline int reshard_tsan_thrd_create(thrd_t* t, thrd_start_t func, void* arg) {
  reshard_tsan_start* s = (reshard_tsan_start*)malloc(sizeof *s);
  if (s == NULL) return thrd_nomem;
  s->func = func;
  s->arg = arg;
  if (pthread_create((pthread_t*)t, NULL, reshard_tsan_trampoline, s) != 0) {
    free(s);
    return thrd_error;
  }
  return thrd_success;
}

static inline int reshard_tsan_thrd_join(thrd_t t, int* result) {
  void* r = NULL;
  if (pthread_join((pthread_t)t, &r) != 0) return thrd_error;
  if (result != NULL) *result = (int)(intptr_t)r;
  return thrd_success;
}

#define thrd_create reshard_tsan_thrd_create
#define thrd_join reshard_tsan_thrd_join
#endif
