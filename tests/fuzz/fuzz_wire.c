/* libFuzzer target for the wire-message header decoder (dist/transport.c): any bytes, any
 * length. A header that decodes must encode back to the same 48 bytes (the format has one
 * spelling), and its fields must be within what the decoder promises. */
#include <stdint.h>
#include <string.h>

#include "sluice/transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sl_msg_hdr h;
    if (sl_msg_decode(data, size, &h) != SL_OK) return 0;
    if (size != SL_MSG_HDR_SIZE) __builtin_trap();
    if (h.type == 0 || h.type >= SL_MSG_TYPES_ || h.dtype >= SL_DT_COUNT_) __builtin_trap();
    uint8_t again[SL_MSG_HDR_SIZE];
    sl_msg_encode(&h, again);
    if (memcmp(again, data, SL_MSG_HDR_SIZE) != 0) __builtin_trap();
    return 0;
}
