/* sl_perm: a seeded bijection of [0, n) evaluated per position (sluice/util.h), for the
 * global shuffle: each epoch one of these over every record of a data set, millions to
 * billions of positions, read in order by every replica at once. */
#include "sluice/util.h"

void sl_perm_init(sl_perm *p, uint64_t n, uint64_t seed) {
    p->n = n ? n : 1;
    int bits = 0;
    while (bits < 64 && (p->n - 1) >> bits) bits++;
    p->half = bits < 2 ? 1 : (bits + 1) / 2;
    p->mask = p->half >= 32 ? 0xffffffffull : ((uint64_t)1 << p->half) - 1;
    uint64_t s = sl_mix2(seed, 0x7065726d75746531ull);
    for (int r = 0; r < 6; r++) p->key[r] = sl_splitmix64(&s);
}

static uint64_t feistel(const sl_perm *p, uint64_t x) {
    uint64_t l = x >> p->half, r = x & p->mask;
    for (int k = 0; k < 6; k++) {
        uint64_t t = l ^ (sl_mix64(r ^ p->key[k]) & p->mask);
        l = r;
        r = t;
    }
    return l << p->half | r;
}

uint64_t sl_perm_at(const sl_perm *p, uint64_t i) {
    if (p->n <= 1) return 0;
    /* cycle walking: the network permutes [0, 2^(2*half)); applying it again from a value
     * outside [0, n) until one lands inside restricts it to a bijection of [0, n) */
    uint64_t x = i;
    do x = feistel(p, x);
    while (x >= p->n);
    return x;
}
