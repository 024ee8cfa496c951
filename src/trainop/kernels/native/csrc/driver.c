/* trainop's single-pass CPU kernels: the driver.
 *
 * Every exported kernel has the same signature:
 *
 *   int trainop_<rule>_<f32|f64>(int64_t n_tensors, const int64_t *numel,
 *                                 const uintptr_t *pointers, const double *hyper,
 *                                 const double *multiplier, const double *found_inf,
 *                                 int n_threads);
 *
 * `pointers` holds the data pointers of every tensor list the rule reads, list after list
 * (pointers[k * n_tensors + t] is tensor t of list k; list 0 is the variables, list 1 the
 * gradients, then the slots). Every tensor is contiguous and tensor t of every list has
 * numel[t] elements. `hyper` holds the rule's hyperparameters as doubles (cast to the
 * variable's type inside, as torch casts a Python scalar). `*multiplier` (may be NULL)
 * scales every gradient element inside the update without storing it; a nonzero
 * `*found_inf` (may be NULL) returns before anything is written. The return value is 0, or
 * -1 when memory for the work plan could not be allocated (then nothing was written).
 *
 * The work is cut into chunks of at most CHUNK elements of one tensor; each OpenMP thread takes
 * the chunks in its contiguous share of all elements, and each chunk runs the rule's loop over
 * contiguous memory (one pass, compiled with vectorisation). Results do not depend on the
 * number of threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef CHUNK
#define CHUNK 32768
#endif
#define PARALLEL_ABOVE 65536
#define MAX_LISTS 6

typedef void (*range_fn)(char **p, int64_t n, const double *hyper, double multiplier,
                         const void *per_tensor, int64_t index);

typedef struct {
    int64_t tensor;
    int64_t offset;  /* within the tensor */
    int64_t length;
    int64_t start;   /* within all elements of all tensors, in order */
} chunk_t;

/* Cuts the tensors into chunks; returns the count (or -1 when out of memory). */
static int64_t plan_chunks(int64_t n_tensors, const int64_t *numel, chunk_t **out,
                           int64_t *total) {
    int64_t count = 0, sum = 0;
    for (int64_t t = 0; t < n_tensors; ++t) count += (numel[t] + CHUNK - 1) / CHUNK;
    chunk_t *chunks = (chunk_t *)malloc((size_t)(count > 0 ? count : 1) * sizeof(chunk_t));
    if (!chunks) return -1;
    int64_t c = 0;
    for (int64_t t = 0; t < n_tensors; ++t) {
        for (int64_t off = 0; off < numel[t]; off += CHUNK) {
            chunks[c].tensor = t;
            chunks[c].offset = off;
            chunks[c].length = numel[t] - off < CHUNK ? numel[t] - off : CHUNK;
            chunks[c].start = sum + off;
            ++c;
        }
        sum += numel[t];
    }
    *out = chunks;
    *total = sum;
    return count;
}

/* One pass of a range function over planned chunks. List k of the pass is list
 * first_list + k of `pointers`. The function gets the chunk's tensor index, or with
 * by_chunk the chunk's own index. */
typedef struct {
    const chunk_t *chunks;
    int64_t count, total, n_tensors;
    const uintptr_t *pointers;
    int first_list, n_lists, by_chunk;
    size_t element_size;
    range_fn fn;
    const double *hyper;
    double multiplier;
    const void *per_tensor;
} pass_t;

/* Runs chunks first..last-1 of one thread. Consecutive chunks of one tensor go to the rule
 * as one run (one loop over the thread's whole part of a large tensor), unless the pass wants
 * a result per chunk. */
static void run_chunks(const pass_t *w, int64_t first, int64_t last) {
    char *p[MAX_LISTS];
    int64_t c = first;
    while (c < last) {
        const chunk_t ch = w->chunks[c];
        int64_t length = ch.length, next = c + 1;
        if (!w->by_chunk)
            for (; next < last && w->chunks[next].tensor == ch.tensor; ++next)
                length += w->chunks[next].length;
        for (int k = 0; k < w->n_lists; ++k)
            p[k] = (char *)w->pointers[(w->first_list + k) * w->n_tensors + ch.tensor]
                   + ch.offset * w->element_size;
        w->fn(p, length, w->hyper, w->multiplier, w->per_tensor, w->by_chunk ? c : ch.tensor);
        c = next;
    }
}

/* Each thread takes the chunks that start in its contiguous share of the elements (one
 * stream per thread, as the hardware prefetchers like it, balanced to within a chunk). */
static void run_pass(const pass_t *w, int n_threads) {
    const int threads = w->total > PARALLEL_ABOVE && n_threads > 1 ? n_threads : 1;
#ifdef _OPENMP
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        {
            const int64_t id = omp_get_thread_num(), team = omp_get_num_threads();
            int64_t first = 0, last;
            while (first < w->count && w->chunks[first].start * team / w->total < id) ++first;
            for (last = first; last < w->count && w->chunks[last].start * team / w->total == id;)
                ++last;
            run_chunks(w, first, last);
        }
        return;
    }
#endif
    run_chunks(w, 0, w->count);
}

/* Runs `fn` over every element of lists 0..n_lists-1; returns 0, or -1 when out of memory
 * (nothing written). */
static int drive(int n_lists, int64_t n_tensors, const int64_t *numel,
                 const uintptr_t *pointers, size_t element_size, range_fn fn,
                 const double *hyper, double multiplier, const void *per_tensor,
                 int n_threads) {
    chunk_t *chunks;
    int64_t total;
    int64_t count = plan_chunks(n_tensors, numel, &chunks, &total);
    if (count < 0) return -1;
    const pass_t pass = {chunks, count, total, n_tensors, pointers, 0, n_lists, 0,
                         element_size, fn, hyper, multiplier, per_tensor};
    run_pass(&pass, n_threads);
    free(chunks);
    return 0;
}

#define SIGNATURE(name)                                                                       \
    int name(int64_t n_tensors, const int64_t *numel, const uintptr_t *pointers,             \
             const double *hyper, const double *multiplier, const double *found_inf,           \
             int n_threads)

/* An exported elementwise kernel: the skip flag, the multiplier, then the chunked rule. */
#define EXPORT_ELEMENTWISE(rule, suffix, real, n_lists)                                       \
    SIGNATURE(trainop_##rule##_##suffix) {                                                    \
        if (found_inf && *found_inf != 0) return 0;                                        \
        return drive(n_lists, n_tensors, numel, pointers, sizeof(real), rule##_##suffix,     \
                     hyper, multiplier ? *multiplier : 1.0, NULL, n_threads);        \
    }

#include "row_hash.h"
#include "unique_rows.h"

/* ------------------------------------------------------------------ the rules, per dtype */
#define real float
#define SFX(name) name##_f32
#define SQRT sqrtf
#define POW powf
#define FABS fabsf
#define SUFFIX f32
#include "rows.h"
#include "rules.h"
#undef real
#undef SFX
#undef SQRT
#undef POW
#undef FABS
#undef SUFFIX

#define real double
#define SFX(name) name##_f64
#define SQRT sqrt
#define POW pow
#define FABS fabs
#define SUFFIX f64
#include "rows.h"
#include "rules.h"

/* Version of the calling convention, checked by the loader. */
int trainop_abi_version(void) { return 2; }
