/* The distinct row indices of a sparse gradient, in order of first occurrence (TF's `unique`,
 * which `_apply_sparse_duplicate_indices` runs before every sparse update). Included once by
 * driver.c.
 *
 * trainop_unique_rows(n, indices, limit, slot_of, first_of):
 *   slot_of[k]  = the position of indices[k] among the distinct indices (k < n);
 *   first_of[s] = the k of the first occurrence of distinct index s (s < the return value).
 * Returns the number of distinct indices, -1 if an index lies outside [0, limit) (then the
 * caller lets torch raise its index error), or -2 when out of memory.
 *
 * One pass over the indices with a hash table (row_hash.h) of at least 2n entries: memory in
 * proportion to n, not to the table's rows. */
int64_t trainop_unique_rows(int64_t n, const int64_t *indices, int64_t limit, int64_t *slot_of,
                            int64_t *first_of) {
    const int bits = table_bits(n);
    const int64_t capacity = (int64_t)1 << bits, mask = capacity - 1;
    int64_t *keys = (int64_t *)malloc((size_t)capacity * sizeof(int64_t));
    int64_t *slots = (int64_t *)malloc((size_t)capacity * sizeof(int64_t));
    if (!keys || !slots) {
        free(keys);
        free(slots);
        return -2;
    }
    for (int64_t h = 0; h < capacity; ++h) keys[h] = -1;
    int64_t distinct = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t row = indices[k];
        if (row < 0 || row >= limit) {
            distinct = -1;
            break;
        }
        int64_t h = row_home(row, bits);
        while (keys[h] != -1 && keys[h] != row) h = (h + 1) & mask;
        if (keys[h] == -1) {
            keys[h] = row;
            slots[h] = distinct;
            first_of[distinct++] = k;
        }
        slot_of[k] = slots[h];
    }
    free(keys);
    free(slots);
    return distinct;
}
