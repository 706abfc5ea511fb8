/* JPEG files for the unit tests (see helper_jpeg.h). */
#include <stdlib.h>
#include <string.h>

#include "helper_jpeg.h"

uint8_t *sl_test_flat_jpeg(int w, int h, size_t *len) {
    size_t blocks = (size_t)((w + 7) / 8) * (size_t)((h + 7) / 8), bits = blocks * 2, scan = (bits + 7) / 8;
    uint8_t *p = malloc(2 + 69 + 13 + 44 + 10 + scan + 2), *q = p;
    if (!p) abort();
    static const uint8_t soi_dqt[] = {0xFF, 0xD8, 0xFF, 0xDB, 0, 67, 0};
    memcpy(q, soi_dqt, sizeof soi_dqt), q += sizeof soi_dqt;
    memset(q, 1, 64), q += 64;
    uint8_t sof[] = {0xFF, 0xC0, 0, 11, 8, (uint8_t)(h >> 8), (uint8_t)h, (uint8_t)(w >> 8), (uint8_t)w, 1, 1, 0x11, 0};
    memcpy(q, sof, sizeof sof), q += sizeof sof;
    for (int cls = 0; cls < 2; cls++) { /* DHT: class cls, table 0: one code of length 1, symbol 0 */
        uint8_t dht[22] = {0xFF, 0xC4, 0, 20, (uint8_t)(cls << 4), 1};
        memcpy(q, dht, sizeof dht), q += sizeof dht;
    }
    static const uint8_t sos[] = {0xFF, 0xDA, 0, 8, 1, 1, 0x00, 0, 63, 0};
    memcpy(q, sos, sizeof sos), q += sizeof sos;
    memset(q, 0, scan);
    if (bits % 8) q[scan - 1] = (uint8_t)(0xFF >> (bits % 8)); /* pad with 1 bits */
    q += scan;
    *q++ = 0xFF;
    *q++ = 0xD9;
    *len = (size_t)(q - p);
    return p;
}
