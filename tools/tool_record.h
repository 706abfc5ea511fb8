/* Private to sluice-record: its commands, split across tools/sluice-record.c (usage, convert,
 * main), tools/tool_record_read.c (inspect, verify, cat) and tools/tool_record_index.c
 * (index). */
#ifndef SLUICE_TOOL_RECORD_H
#define SLUICE_TOOL_RECORD_H

#include <stdbool.h>
#include <stddef.h>

#include "sluice/tfrecord.h"

/* The commands, with argv after the command name. Each returns the exit status:
 * SL__EXIT_OK, SL__EXIT_FAIL or SL__EXIT_USAGE (tools/tool.h), having printed what went
 * wrong on stderr. */
int sl__record_inspect(int argc, char **argv);
int sl__record_verify(int argc, char **argv);
int sl__record_cat(int argc, char **argv);
int sl__record_index(int argc, char **argv);

/* --compression NAME into *out (NULL: SL_COMP_AUTO). SL__EXIT_OK, or SL__EXIT_USAGE after
 * a usage error naming prog on stderr. */
int sl__record_parse_compression(const char *prog, const char *name, sl_compression *out);

#endif
