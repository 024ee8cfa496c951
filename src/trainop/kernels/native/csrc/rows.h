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

/* One row of LazyAdam: c = {alpha, beta1, beta2, epsilon, 1 - beta1, 1 - beta2}.
 *   m = m*beta1 + g*(1-beta1); v = v*beta2 + g*g*(1-beta2); x -= alpha*m/(sqrt(v) + eps) */
static inline void SFX(lazy_adam_row)(int64_t width, const real *restrict g, real *restrict mr,
                                      real *restrict vr, real *restrict xr, const real *c) {
    const real alpha = c[0], beta1 = c[1], beta2 = c[2], eps = c[3];
    const real one_minus_beta1 = c[4], one_minus_beta2 = c[5];
    for (int64_t j = 0; j < width; ++j) {
        const real mj = mr[j] * beta1 + g[j] * one_minus_beta1;
        const real vj = vr[j] * beta2 + g[j] * g[j] * one_minus_beta2;
        mr[j] = mj;
        vr[j] = vj;
        xr[j] += -(alpha * mj / (SQRT(vj) + eps));
    }
}

/* One entry of a thread's table of distinct rows: the row, and its first and last occurrence
 * among the gradient's rows (the occurrences in between are chained through `next`). */
typedef struct {
    int64_t row, first, last;
} SFX(occurrences_t);

/* LazyAdam's sparse rule straight from a gradient's rows as given: `indices` (n of them, in
 * [0, n_table_rows), repeats allowed, e.g. an embedding's backward in lookup order) and
 * `values` ([n, width]). As TF, the values of a repeated row are first summed in the order
 * given (unique + unsorted_segment_sum), then each distinct row r is updated once by
 * lazy_adam_row; no other row of m, v or var changes. hyper: alpha, beta1, beta2, epsilon.
 *
 * Both steps share one parallel region: each thread owns the rows that row_owner gives it,
 * finds their occurrences among all the indices with its own hash table, and sums and updates
 * only those rows, prefetching them PREFETCH_AHEAD rows ahead. No row is touched by two
 * threads, so results do not depend on the number of threads.
 * Returns 0; -1 (nothing written) if an index lies outside [0, n_table_rows); -2 (nothing
 * written) when out of memory. */
int SFX(trainop_lazy_adam_rows)(int64_t n, int64_t width, int64_t n_table_rows,
                                const int64_t *indices, const real *values, real *var, real *m,
                                real *v, const double *hyper, int n_threads) {
    for (int64_t k = 0; k < n; ++k)
        if (indices[k] < 0 || indices[k] >= n_table_rows) return -1;
    if (n == 0) return 0;
    const real c[6] = {(real)hyper[0], (real)hyper[1], (real)hyper[2], (real)hyper[3],
                       (real)(1.0 - hyper[1]), (real)(1.0 - hyper[2])};
    const int64_t bytes = width * (int64_t)sizeof(real);
    const int threads = n * width > PARALLEL_ABOVE && n_threads > 1 ? n_threads : 1;
    int64_t *next = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    if (!next) return -2;
    int failed = 0;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        const int team = TEAM_SIZE(), id = THREAD_ID();
        int64_t own = 0;
        for (int64_t k = 0; k < n; ++k) own += row_owner(indices[k], team) == id;
        const int bits = table_bits(own);
        const int64_t capacity = (int64_t)1 << bits, mask = capacity - 1;
        SFX(occurrences_t) *table =
            (SFX(occurrences_t) *)malloc((size_t)capacity * sizeof(SFX(occurrences_t)));
        int64_t *order = (int64_t *)malloc((size_t)(own > 0 ? own : 1) * sizeof(int64_t));
        real *sum = (real *)malloc((size_t)bytes);
        if (!table || !order || !sum) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp barrier
        int stop;
#pragma omp atomic read
        stop = failed;
        if (!stop) {
            for (int64_t h = 0; h < capacity; ++h) table[h].row = -1;
            int64_t distinct = 0;
            for (int64_t k = 0; k < n; ++k) {
                const int64_t row = indices[k];
                if (row_owner(row, team) != id) continue;
                int64_t h = row_home(row, bits);
                while (table[h].row != -1 && table[h].row != row) h = (h + 1) & mask;
                if (table[h].row == -1) {
                    table[h].row = row;
                    table[h].first = k;
                    order[distinct++] = h;
                } else {
                    next[table[h].last] = k;
                }
                table[h].last = k;
                next[k] = -1;
            }
            for (int64_t i = 0; i < distinct; ++i) {
                if (i + PREFETCH_AHEAD < distinct) {
                    const int64_t ahead = table[order[i + PREFETCH_AHEAD]].row * width;
                    prefetch_row(m + ahead, bytes);
                    prefetch_row(v + ahead, bytes);
                    prefetch_row(var + ahead, bytes);
                }
                const SFX(occurrences_t) e = table[order[i]];
                const real *g = values + e.first * width;
                if (e.first != e.last) {  /* a repeated row: its values summed in order */
                    for (int64_t j = 0; j < width; ++j) sum[j] = g[j];
                    for (int64_t k = next[e.first]; k != -1; k = next[k])
                        for (int64_t j = 0; j < width; ++j) sum[j] += values[k * width + j];
                    g = sum;
                }
                const int64_t base = e.row * width;
                SFX(lazy_adam_row)(width, g, m + base, v + base, var + base, c);
            }
        }
        free(table);
        free(order);
        free(sum);
    }
    free(next);
    return failed ? -2 : 0;
}
