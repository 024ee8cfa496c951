/* Sparse-row kernels: a gradient given as rows `indices` of a table whose rows hold `width`
 * contiguous elements. Included once per element type by driver.c, before rules.h, whose
 * rules get their sparse-row exports from EXPORT_ROWS here.
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

/* One entry of a thread's table of distinct rows: the row, and its first and last occurrence
 * among the gradient's rows (the occurrences in between are chained through `next`). */
typedef struct {
    int64_t row, first, last;
} SFX(occurrences_t);

/* A sparse update straight from a gradient's rows as given: `indices` (n of them, in
 * [0, n_table_rows), repeats allowed, e.g. an embedding's backward in lookup order) and
 * `values` ([n, width]). As TF, the values of a repeated row are first summed in the order
 * given (unique + unsorted_segment_sum); then the range function `fn` of a rule (rules.h) runs
 * once on each distinct row r, with p[0] = row r of tables[0] (the variable), p[1] = the row's
 * gradient and p[2 + k] = row r of tables[1 + k] (the slots). No other row changes.
 *
 * Both steps share one parallel region: each thread owns the rows that row_owner gives it,
 * finds their occurrences among all the indices with its own hash table, and sums and updates
 * only those rows, prefetching them PREFETCH_AHEAD rows ahead. No row is touched by two
 * threads, so results do not depend on the number of threads.
 * Returns 0; -1 (nothing written) if an index lies outside [0, n_table_rows); -2 (nothing
 * written) when out of memory. */
static int SFX(drive_rows)(range_fn fn, int n_tables, int64_t n, int64_t width,
                           int64_t n_table_rows, const int64_t *indices, const real *values,
                           const uintptr_t *tables, const double *hyper, int n_threads) {
    for (int64_t k = 0; k < n; ++k)
        if (indices[k] < 0 || indices[k] >= n_table_rows) return -1;
    if (n == 0) return 0;
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
            char *p[MAX_LISTS];
            for (int64_t i = 0; i < distinct; ++i) {
                if (i + PREFETCH_AHEAD < distinct) {
                    const int64_t ahead = table[order[i + PREFETCH_AHEAD]].row * width;
                    for (int t = 0; t < n_tables; ++t)
                        prefetch_row((const real *)tables[t] + ahead, bytes);
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
                p[0] = (char *)((real *)tables[0] + base);
                p[1] = (char *)g;
                for (int t = 1; t < n_tables; ++t) p[1 + t] = (char *)((real *)tables[t] + base);
                fn(p, width, hyper, 1.0, NULL, 0);
            }
        }
        free(table);
        free(order);
        free(sum);
    }
    free(next);
    return failed ? -2 : 0;
}

/* The sparse-row export of a rule whose range function is SFX(rule): n_tables = the variable
 * and its slots. */
#define EXPORT_ROWS(rule, n_tables)                                                           \
    int SFX(trainop_rows_##rule)(int64_t n, int64_t width, int64_t n_table_rows,             \
                                 const int64_t *indices, const real *values,                \
                                 const uintptr_t *tables, const double *hyper,              \
                                 int n_threads) {                                           \
        return SFX(drive_rows)(SFX(rule), n_tables, n, width, n_table_rows, indices, values, \
                               tables, hyper, n_threads);                                   \
    }
