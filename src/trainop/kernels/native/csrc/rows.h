/* Sparse-row kernels: a gradient given as rows `indices` of a table whose rows hold `width`
 * contiguous elements. Included once per element type by driver.c (as rules.h).
 *
 * Random rows of a large table are latency-bound, not bandwidth-bound: each loop prefetches
 * the rows PREFETCH_AHEAD iterations ahead, so the memory system serves several rows at once. */
#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 8
#define CACHE_LINE 64
/* Prefetch the `bytes` bytes at `row` for writing. */
static inline void prefetch_row(const void *row, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += CACHE_LINE)
        __builtin_prefetch((const char *)row + off, 1, 3);
}
#endif

/* The summed rows of a gradient with repeated indices (TF's `unsorted_segment_sum` after
 * `unique`): out[slot_of[k]] = sum of values[k] over k in order (the first one copied, each
 * later one added, as TF adds them in order). slot_of and first_of from trainop_unique_rows. */
void SFX(trainop_sum_rows)(int64_t n, int64_t width, const real *values, const int64_t *slot_of,
                           const int64_t *first_of, real *out) {
    for (int64_t k = 0; k < n; ++k) {
        const int64_t s = slot_of[k];
        const real *restrict in = values + k * width;
        real *restrict row = out + s * width;
        if (first_of[s] == k)
            for (int64_t j = 0; j < width; ++j) row[j] = in[j];
        else
            for (int64_t j = 0; j < width; ++j) row[j] += in[j];
    }
}

/* LazyAdam's sparse rule: only the rows `indices` (distinct, n_rows of them) of m, v and var
 * change; `values` holds the rows' summed gradients. hyper: alpha, beta1, beta2, epsilon.
 *   m[r] = m[r]*beta1 + g*(1-beta1); v[r] = v[r]*beta2 + g*g*(1-beta2)
 *   var[r] -= alpha*m[r]/(sqrt(v[r]) + eps)
 * Rows are shared among threads (they are distinct, so no two threads touch one row).
 * Returns 0, or -1 (nothing written) if an index lies outside [0, n_table_rows). */
int SFX(trainop_lazy_adam_rows)(int64_t n_rows, int64_t width, int64_t n_table_rows,
                                const int64_t *indices, const real *values, real *var, real *m,
                                real *v, const double *hyper, int n_threads) {
    for (int64_t k = 0; k < n_rows; ++k)
        if (indices[k] < 0 || indices[k] >= n_table_rows) return -1;
    const real alpha = (real)hyper[0], beta1 = (real)hyper[1], beta2 = (real)hyper[2];
    const real eps = (real)hyper[3];
    const real one_minus_beta1 = (real)(1.0 - hyper[1]), one_minus_beta2 = (real)(1.0 - hyper[2]);
    const int64_t bytes = width * (int64_t)sizeof(real);
    const int threads = n_rows * width > PARALLEL_ABOVE && n_threads > 1 ? n_threads : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t k = 0; k < n_rows; ++k) {
        if (k + PREFETCH_AHEAD < n_rows) {
            const int64_t ahead = indices[k + PREFETCH_AHEAD] * width;
            prefetch_row(m + ahead, bytes);
            prefetch_row(v + ahead, bytes);
            prefetch_row(var + ahead, bytes);
        }
        const int64_t base = indices[k] * width;
        const real *restrict g = values + k * width;
        real *restrict mr = m + base, *restrict vr = v + base, *restrict xr = var + base;
        for (int64_t j = 0; j < width; ++j) {
            const real mj = mr[j] * beta1 + g[j] * one_minus_beta1;
            const real vj = vr[j] * beta2 + g[j] * g[j] * one_minus_beta2;
            mr[j] = mj;
            vr[j] = vj;
            xr[j] += -(alpha * mj / (SQRT(vj) + eps));
        }
    }
    return 0;
}
