/* JPEG files for the unit tests, written by hand (no encoder involved). */
#ifndef SLUICE_TEST_HELPER_JPEG_H
#define SLUICE_TEST_HELPER_JPEG_H

#include <stddef.h>
#include <stdint.h>

/* A valid baseline grayscale JPEG of W x H flat grey pixels (128): each Huffman table has
 * one 1-bit code (DC difference 0; end of block), so an 8x8 block takes 2 bits and a
 * 30000 x 30000 image (900 million pixels) fits in 3.5 MB. Returns the malloc'd file (the
 * caller frees it) with its length in *LEN; aborts when out of memory. */
uint8_t *sl_test_flat_jpeg(int w, int h, size_t *len);

#endif
