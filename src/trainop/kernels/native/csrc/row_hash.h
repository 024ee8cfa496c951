/* Hashing row indices, shared by the deduplication (unique_rows.h) and the sparse-row driver
 * (rows.h). Included once by driver.c, before the per-dtype files.
 *
 * Tables are open-addressing with linear probing and Fibonacci hashing, at least twice as many
 * entries as keys (load <= 1/2: about 1.5 probes per lookup). */
#ifdef _OPENMP
#define THREAD_ID() omp_get_thread_num()
#define TEAM_SIZE() omp_get_num_threads()
#else
#define THREAD_ID() 0
#define TEAM_SIZE() 1
#endif

#define FIBONACCI UINT64_C(0x9E3779B97F4A7C15)

/* The smallest `bits` with 2^bits >= 2n (at least 1). */
static inline int table_bits(int64_t n) {
    int bits = 1;
    while (((int64_t)1 << bits) < 2 * n) ++bits;
    return bits;
}

/* The home slot of `row` in a table of 2^bits entries. */
static inline int64_t row_home(int64_t row, int bits) {
    return (int64_t)(((uint64_t)row * FIBONACCI) >> (64 - bits));
}

/* Which of `team` threads owns `row` (rows spread evenly whatever their pattern). */
static inline int row_owner(int64_t row, int team) {
    return (int)(((((uint64_t)row * FIBONACCI) >> 32) * (uint64_t)team) >> 32);
}
