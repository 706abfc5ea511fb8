/* libFuzzer target for the CURVE key-file and allow-list parsers (dist/curve.c): any bytes
 * as a keypair file, a public file and an allow-list. What parses must hold keys of 40 Z85
 * characters (a keypair's secret matching its public key), and an allow-list written back
 * one bare key per line must parse to the same keys. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "dist/curve_priv.h"

static void check_key(const char *k) {
    if (strlen(k) != 40) __builtin_trap();
    uint8_t bin[32];
    if (!zmq_z85_decode(bin, k)) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *buf = (const char *)data;
    char pub[41], sec[41], derived[41];
    if (sl__curve_parse_keyfile(buf, size, "fuzz", pub, sec) == SL_OK) {
        check_key(pub);
        check_key(sec);
        if (zmq_curve_public(derived, sec) != 0 || strcmp(derived, pub) != 0) __builtin_trap();
    }
    if (sl__curve_parse_keyfile(buf, size, "fuzz", pub, NULL) == SL_OK) check_key(pub);
    char(*keys)[41];
    int n;
    if (sl__curve_parse_allow(buf, size, "fuzz", &keys, &n) == SL_OK) {
        if (n < 1 || !keys) __builtin_trap();
        char *text = malloc((size_t)n * 41 + 1);
        if (text) {
            for (int i = 0; i < n; i++) {
                check_key(keys[i]);
                memcpy(text + (size_t)i * 41, keys[i], 40);
                text[(size_t)i * 41 + 40] = '\n';
            }
            char(*again)[41];
            int m;
            if (sl__curve_parse_allow(text, (size_t)n * 41, "again", &again, &m) != SL_OK || m != n ||
                memcmp(again, keys, (size_t)n * sizeof *keys) != 0)
                __builtin_trap();
            free(again);
            free(text);
        }
        free(keys);
    } else if (keys || n) {
        __builtin_trap();
    }
    return 0;
}
